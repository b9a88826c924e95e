package ingest

import (
	"sync"
	"time"
)

// logLimiter lets through the first rejection log line of each (reason,
// node) and then at most one per period, carrying how many were suppressed,
// so a flood cannot flood the log.
type logLimiter struct {
	period time.Duration

	mu sync.Mutex // guards m
	m  map[string]*logState
}

type logState struct {
	last       time.Time
	suppressed int
}

const maxLogKeys = 10000

func newLogLimiter(period time.Duration) *logLimiter {
	return &logLimiter{period: period, m: map[string]*logState{}}
}

// allow reports whether to log now and how many lines were suppressed since
// the last one.
func (l *logLimiter) allow(key string, now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.m[key]
	if !ok {
		if len(l.m) >= maxLogKeys {
			clear(l.m)
		}
		l.m[key] = &logState{last: now}
		return true, 0
	}
	if now.Sub(s.last) < l.period {
		s.suppressed++
		return false, 0
	}
	n := s.suppressed
	s.last, s.suppressed = now, 0
	return true, n
}

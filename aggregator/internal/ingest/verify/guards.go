package verify

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// sweepEvery is how often the idle entries of the guards below are dropped.
const sweepEvery = time.Minute

// nodeLimiters is one token bucket per node, shared by all of the node's
// streams on this replica.
type nodeLimiters struct {
	rate  rate.Limit
	burst int
	idle  time.Duration

	mu sync.Mutex // guards the fields below
	m  map[string]*nodeLimiter
	// sweptAt is when idle limiters were last dropped.
	sweptAt time.Time
}

type nodeLimiter struct {
	lim  *rate.Limiter
	used time.Time
}

func newNodeLimiters(perSecond float64, burst int) *nodeLimiters {
	// A limiter idle long enough to have refilled can be dropped: a new one
	// starts full, so dropping it changes nothing.
	idle := time.Duration(float64(burst)/perSecond*float64(time.Second)) + time.Minute
	return &nodeLimiters{rate: rate.Limit(perSecond), burst: burst, idle: idle, m: map[string]*nodeLimiter{}}
}

// allow takes one token from node's bucket.
func (l *nodeLimiters) allow(node string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.sweptAt) > sweepEvery {
		l.sweptAt = now
		for k, v := range l.m {
			if now.Sub(v.used) > l.idle {
				delete(l.m, k)
			}
		}
	}
	nl, ok := l.m[node]
	if !ok {
		nl = &nodeLimiter{lim: rate.NewLimiter(l.rate, l.burst)}
		l.m[node] = nl
	}
	nl.used = now
	return nl.lim.AllowN(now, 1)
}

// replayGuard remembers the last accepted sequence of every agent instance,
// keyed by node, key id and instance id (all authenticated), so one node can
// never move another node's sequence.
type replayGuard struct {
	// idle is how long an instance may stay silent before it is forgotten:
	// longer than twice the skew window, so any report that could still pass
	// the skew check is still caught as a replay.
	idle time.Duration

	mu sync.Mutex // guards the fields below
	m  map[replayKey]*replayEntry
	// sweptAt is when idle entries were last dropped.
	sweptAt time.Time
}

type replayKey struct{ node, keyID, instance string }

type replayEntry struct {
	// mu is held across the check, the sink call and the update, so the sink
	// sees one instance's reports in sequence order.
	mu   sync.Mutex
	last uint64
	// used is guarded by replayGuard.mu.
	used time.Time
}

func newReplayGuard(skew time.Duration) *replayGuard {
	return &replayGuard{idle: 2*skew + time.Minute, m: map[replayKey]*replayEntry{}}
}

func (g *replayGuard) entry(k replayKey, now time.Time) *replayEntry {
	g.mu.Lock()
	defer g.mu.Unlock()
	if now.Sub(g.sweptAt) > sweepEvery {
		g.sweptAt = now
		for key, e := range g.m {
			if now.Sub(e.used) > g.idle {
				delete(g.m, key)
			}
		}
	}
	e, ok := g.m[k]
	if !ok {
		e = &replayEntry{}
		g.m[k] = e
	}
	e.used = now
	return e
}

package quorum

import (
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Auditor counts and logs the claims the readers reject
// (cozy_health_claims_rejected_total{kind,reason}). A claim that stays
// rejected is judged again on every rollup and drain check; it is counted
// once per node, kind and reason per Window, and at most LogsPerWindow
// rejections are logged per Window (the rest are counted and summed into
// the next line). Safe for concurrent use; a nil Auditor does nothing.
type Auditor struct {
	counter *prometheus.CounterVec
	log     *zap.Logger
	now     func() time.Time

	// mu guards seen, logged, suppressed and windowStart.
	mu          sync.Mutex
	seen        map[Rejection]time.Time
	windowStart time.Time
	logged      int
	suppressed  int
}

// Window is how long one rejection (node, kind, reason) is counted once.
const Window = 10 * time.Minute

// LogsPerWindow bounds the rejection log lines per Window.
const LogsPerWindow = 20

// NewAuditor registers the rejection counter on reg (nil: not
// registered). now may be nil (time.Now).
func NewAuditor(reg prometheus.Registerer, log *zap.Logger, now func() time.Time) (*Auditor, error) {
	if log == nil {
		log = zap.NewNop()
	}
	if now == nil {
		now = time.Now
	}
	a := &Auditor{
		counter: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "cozy_health", Name: "claims_rejected_total",
			Help: "Claims about a cluster (raft members, cluster sizes, alarms, DRBD replicas) not believed, by kind and reason; counted once per node, kind and reason per 10 minutes while they persist."},
			[]string{"kind", "reason"}),
		log:  log.With(zap.String("component", "claims")),
		now:  now,
		seen: map[Rejection]time.Time{},
	}
	if reg != nil {
		if err := reg.Register(a.counter); err != nil {
			return nil, fmt.Errorf("register claims metrics: %w", err)
		}
	}
	return a, nil
}

// Reject records one rejected claim; detail (a resource, a value) is
// logged, not counted.
func (a *Auditor) Reject(r Rejection, detail string) {
	if a == nil {
		return
	}
	now := a.now()
	a.mu.Lock()
	if at, ok := a.seen[r]; ok && now.Sub(at) < Window {
		a.mu.Unlock()
		return
	}
	a.seen[r] = now
	if now.Sub(a.windowStart) >= Window {
		for k, at := range a.seen {
			if now.Sub(at) >= Window {
				delete(a.seen, k)
			}
		}
		a.windowStart, a.logged = now, 0
	}
	logIt := a.logged < LogsPerWindow
	suppressed := 0
	if logIt {
		a.logged++
		suppressed, a.suppressed = a.suppressed, 0
	} else {
		a.suppressed++
	}
	a.mu.Unlock()
	a.counter.WithLabelValues(r.Kind, r.Reason).Inc()
	if logIt {
		a.log.Warn("claim rejected", zap.String("node", r.Node), zap.String("kind", r.Kind), zap.String("reason", r.Reason),
			zap.String("detail", detail), zap.Int("suppressedSinceLastLine", suppressed))
	}
}

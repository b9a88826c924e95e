package drain

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Nodes lists the nodes a snapshot knows (Known), sorted.
func (s *Snapshot) Nodes() []string {
	out := make([]string, 0, len(s.nodes))
	for name := range s.nodes {
		if s.Known(name) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// Budget is the disruption budget, always computed: the reboot verdict of
// every node the state knows, as cozy_health_drain_verdict{node,verdict}
// (1 for the node's current verdict, 0 for the other two). Every replica
// computes it from its own full state, so any replica's series answer
// "which node could be drained now?" and "can any?".
type Budget struct {
	svc   *Service
	gauge *prometheus.GaugeVec

	// mu guards last: the verdict last exported per node, so a node gone
	// from the state loses its series.
	mu   sync.Mutex
	last map[string]Result
}

// NewBudget returns the budget of svc; reg may be nil.
func NewBudget(svc *Service, reg prometheus.Registerer) (*Budget, error) {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "cozy_health", Subsystem: "drain", Name: "verdict",
		Help: "The drain verdict (reboot) of every node, computed continuously: 1 for the node's current verdict (safe, blocked, unknown), 0 for the others."},
		[]string{"node", "verdict"})
	if reg != nil {
		if err := reg.Register(g); err != nil {
			return nil, fmt.Errorf("register drain budget metric: %w", err)
		}
	}
	return &Budget{svc: svc, gauge: g, last: map[string]Result{}}, nil
}

// Update evaluates every known node now and exports the verdicts; it
// returns them by node.
func (b *Budget) Update() map[string]Result {
	now := b.svc.clock.Now()
	snap := b.svc.Snapshot(now)
	out := make(map[string]Result, snap.Len())
	for _, node := range snap.Nodes() {
		res := EvaluateIntent(node, IntentReboot, snap, now)
		out[node] = res
		for _, v := range []Verdict{Safe, Blocked, Unknown} {
			val := 0.0
			if res.Verdict == v {
				val = 1
			}
			b.gauge.WithLabelValues(node, string(v)).Set(val)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for node := range b.last {
		if _, ok := out[node]; !ok {
			for _, v := range []Verdict{Safe, Blocked, Unknown} {
				b.gauge.DeleteLabelValues(node, string(v))
			}
		}
	}
	b.last = out
	return out
}

// Run updates the budget every period until ctx ends.
func (b *Budget) Run(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		b.Update()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

package app

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/cozystack/cozy-health/aggregator/internal/metrics"
	"github.com/cozystack/cozy-health/aggregator/internal/rollup"
	"github.com/cozystack/cozy-health/aggregator/internal/state"
	"github.com/cozystack/cozy-health/aggregator/internal/writer"
	healthv1alpha1 "github.com/cozystack/cozy-health/pkg/apis/health/v1alpha1"
	"github.com/cozystack/cozy-health/pkg/report"
)

// Engine rolls the state up on a period: Compute, then damping, then
// compaction; it publishes the result to the metrics and hands it to the
// writer. Every replica runs it; only the leader's writer writes.
type Engine struct {
	state     *state.State
	cfg       rollup.Config
	maxListed int
	metrics   *metrics.Metrics
	writer    *writer.Writer
	clock     clock.WithTicker
	log       *zap.Logger

	// evalMu serializes Evaluate (the damper is not concurrent).
	evalMu sync.Mutex
	damper *rollup.Damper
	cache  *rollup.Cache
	// alwaysRecompute turns retiming off (tests compare both ways).
	alwaysRecompute bool

	// cluster, when set, returns the facts read centrally (the LINSTOR
	// controller's view) merged into their component; clusterGen and
	// clusterFresh are what the last evaluation merged (retiming is valid
	// only while they hold).
	cluster      func(now time.Time) *rollup.ClusterFacts
	clusterGen   uint64
	clusterFresh bool

	// mu guards latest.
	mu     sync.RWMutex
	latest map[string]*rollup.ComponentStatus
}

// SetCluster makes every evaluation merge the facts f returns
// (rollup.MergeCluster). Call before Run.
func (e *Engine) SetCluster(f func(now time.Time) *rollup.ClusterFacts) { e.cluster = f }

// NewEngine wires an Engine. w may be nil (no writer).
func NewEngine(st *state.State, cfg rollup.Config, holds rollup.Holds, maxListed int, m *metrics.Metrics, w *writer.Writer, clk clock.WithTicker, log *zap.Logger) *Engine {
	if maxListed <= 0 {
		maxListed = rollup.DefaultMaxListed
	}
	return &Engine{state: st, cfg: cfg, maxListed: maxListed, metrics: m, writer: w, clock: clk, log: log.With(zap.String("component", "rollup")),
		damper: rollup.NewDamper(holds), cache: rollup.NewCache()}
}

// Seed hands the damper the conditions the Health objects carry (see
// rollup.Damper.Seed), so lastTransitionTime survives a new leader.
func (e *Engine) Seed(objs []healthv1alpha1.Health, until time.Time) {
	e.evalMu.Lock()
	defer e.evalMu.Unlock()
	for _, h := range objs {
		seeds := make(map[rollup.SeedKey]rollup.Seed, len(h.Status.Conditions))
		for _, c := range h.Status.Conditions {
			if c.LastTransitionTime.IsZero() {
				continue
			}
			k := rollup.SeedKey{Type: c.Type}
			if r := c.ResourceRef; r != nil {
				k.Kind, k.Name, k.Namespace = r.Kind, r.Name, r.Namespace
			}
			seeds[k] = rollup.Seed{Status: metav1.ConditionStatus(c.Status), Reason: c.Reason, LastTransition: c.LastTransitionTime.Time}
		}
		e.damper.Seed(h.Spec.Component, seeds, until)
	}
}

// Evaluate rolls the state up once at the clock's now and publishes it.
//
// When nothing the rollup judges changed since the last evaluation (the
// same nodes, each judging the same and each as fresh as then) and the
// damper holds nothing back, the last answer is retimed instead of
// recomputed: only observedAt and freshUntil move, which the writer's
// refresh carries. That is the steady state of a large healthy cluster;
// TestEngineRetimeEqualsRecompute holds it to the full computation.
func (e *Engine) Evaluate() map[string]*rollup.ComponentStatus {
	e.evalMu.Lock()
	defer e.evalMu.Unlock()
	start := time.Now()
	now := e.clock.Now()
	var out map[string]*rollup.ComponentStatus
	var observed map[string]time.Time
	unchanged := false
	var cf *rollup.ClusterFacts
	if e.cluster != nil {
		cf = e.cluster(now)
	}
	sameCluster := cf == nil || (cf.Gen == e.clusterGen && cf.Fresh(now) == e.clusterFresh)
	if e.latest != nil && !e.alwaysRecompute && !e.damper.Holding() && sameCluster {
		e.state.Read(func(nodes map[string]state.Entry) { observed, unchanged = e.cache.Unchanged(nodes, now, e.cfg) })
	}
	if cf != nil {
		e.clusterGen, e.clusterFresh = cf.Gen, cf.Fresh(now)
	}
	if unchanged {
		out = rollup.Retime(e.latest, observed, now, e.cfg)
		if cf.Fresh(now) {
			_, agents := observed[cf.Component]
			rollup.ClampCluster(out[cf.Component], cf, !agents, e.cfg)
		}
		if e.writer != nil {
			for _, comp := range report.NodeComponents {
				e.writer.Retimed(out[comp])
			}
		}
		if e.metrics != nil {
			e.metrics.ObserveRollup(metrics.RollupRetimed, time.Since(start))
		}
	} else {
		out = e.recompute(e.state.Snapshot(), now, cf)
		if e.metrics != nil {
			e.metrics.ObserveRollup(metrics.RollupFull, time.Since(start))
		}
	}
	e.mu.Lock()
	e.latest = out
	e.mu.Unlock()
	return out
}

// recompute is the full rollup: Compute, then damping, compaction and
// stamping, published to the metrics and the writer.
func (e *Engine) recompute(snap state.Snapshot, now time.Time, cf *rollup.ClusterFacts) map[string]*rollup.ComponentStatus {
	out := rollup.ComputeCached(snap, now, e.cfg, e.cache)
	if cf != nil {
		rollup.MergeCluster(out[cf.Component], cf, now, e.cfg)
	}
	for _, comp := range report.NodeComponents {
		cs := out[comp]
		e.damper.Apply(cs, now)
		rollup.Compact(cs, e.maxListed)
		e.damper.Stamp(cs, now)
		if e.metrics != nil {
			nodes := make(map[string]report.Status, len(cs.Nodes))
			for n, ns := range cs.Nodes {
				nodes[n] = ns.Status
			}
			e.metrics.Publish(comp, cs.Overall, nodes)
			e.metrics.PublishIssues(comp, writer.IssuesOf(cs))
		}
		if e.writer != nil {
			e.writer.Update(cs)
		}
	}
	return out
}

// Latest is the last published rollup (nil before the first). Callers must
// not modify it.
func (e *Engine) Latest() map[string]*rollup.ComponentStatus {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.latest
}

// Run evaluates every period, and at the instant the next node misses its
// heartbeat when that comes sooner, until ctx is cancelled: a silent node
// reads Unknown one rollup after its grace, not up to a period later.
func (e *Engine) Run(ctx context.Context, period time.Duration) {
	for {
		e.Evaluate()
		now := e.clock.Now()
		wait := period
		var next time.Time
		e.state.Read(func(nodes map[string]state.Entry) { next = e.cfg.NextStale(nodes, now) })
		if d := next.Sub(now); !next.IsZero() && d < wait {
			wait = max(d, 0)
		}
		t := e.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

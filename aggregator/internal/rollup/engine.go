package rollup

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/cozystack/cozy-health/aggregator/internal/metrics"
	"github.com/cozystack/cozy-health/aggregator/internal/quorum"
	"github.com/cozystack/cozy-health/aggregator/internal/state"
	"github.com/cozystack/cozy-health/aggregator/internal/status"
	healthv1alpha1 "github.com/cozystack/cozy-health/pkg/apis/health/v1alpha1"
	"github.com/cozystack/cozy-health/pkg/report"
)

// Engine is the rollup's loop: on a period it rolls the state up (Compute),
// damps (Damper.Apply), compacts (Compact) and stamps (Damper.Stamp), and
// hands every node-local component's desired status to one
// status.Publisher (the metrics and the writer). Every replica runs it;
// only the leader's writer writes.
type Engine struct {
	state     *state.State
	cfg       Config
	maxListed int
	// namespace is the platform namespace, where the node-local components
	// are published.
	namespace string
	// metrics counts the rollups (nil for none); pub receives them.
	metrics *metrics.Metrics
	pub     status.Publisher
	clock   clock.WithTicker
	log     *zap.Logger

	// evalMu serializes Evaluate (the damper is not concurrent).
	evalMu sync.Mutex
	damper *Damper
	cache  *Cache
	// changes collects the nodes changed since the last evaluation, which
	// the cache compares alone (Cache.UnchangedSince).
	changes *state.Tracker
	// alwaysRecompute turns retiming off (tests compare both ways).
	alwaysRecompute bool

	// cluster, when set, returns the facts read centrally (the LINSTOR
	// controller's view) merged into their component; clusterGen and
	// clusterFresh are what the last evaluation merged (retiming is valid
	// only while they hold).
	cluster      func(now time.Time) *ClusterFacts
	clusterGen   uint64
	clusterFresh bool
	// budget, when set, returns the drain budget's last evaluation, worded
	// as the node component's DisruptionBudget condition; budgetGen and
	// budgetFresh are what the last evaluation worded.
	budget      func() *BudgetFacts
	budgetGen   uint64
	budgetFresh bool

	// mu guards latest.
	mu     sync.RWMutex
	latest map[string]*status.Component
}

// SetCluster makes every evaluation merge the facts f returns
// (MergeCluster). Call before Run.
func (e *Engine) SetCluster(f func(now time.Time) *ClusterFacts) { e.cluster = f }

// SetBudget makes every evaluation add the DisruptionBudget condition
// (BudgetCondition) of the facts f returns to the node component. Call
// before Run.
func (e *Engine) SetBudget(f func() *BudgetFacts) { e.budget = f }

// NewEngine wires an Engine that publishes into namespace. m and pub may be
// nil (no rollup metrics, no publisher).
func NewEngine(st *state.State, cfg Config, holds Holds, maxListed int, namespace string, m *metrics.Metrics, pub status.Publisher, clk clock.WithTicker, log *zap.Logger) *Engine {
	if maxListed <= 0 {
		maxListed = DefaultMaxListed
	}
	if pub == nil {
		pub = status.Publishers(nil)
	}
	return &Engine{state: st, cfg: cfg, maxListed: maxListed, namespace: namespace, metrics: m, pub: pub, clock: clk, log: log.With(zap.String("component", "rollup")),
		damper: NewDamper(holds), cache: NewCache(), changes: st.Track()}
}

// SetRejected hands every raft claim the quorum reader rejects to f
// (Cache.SetRejected).
func (e *Engine) SetRejected(f func(quorum.Rejection, string)) {
	e.evalMu.Lock()
	defer e.evalMu.Unlock()
	e.cache.SetRejected(f)
}

// Seed hands the damper the conditions the Health objects carry (see
// Damper.Seed), so lastTransitionTime survives a new leader.
func (e *Engine) Seed(objs []healthv1alpha1.Health, until time.Time) {
	e.evalMu.Lock()
	defer e.evalMu.Unlock()
	for _, h := range objs {
		seeds := make(map[SeedKey]Seed, len(h.Status.Conditions))
		for _, c := range h.Status.Conditions {
			if c.LastTransitionTime.IsZero() {
				continue
			}
			k := SeedKey{Type: c.Type}
			if r := c.ResourceRef; r != nil {
				k.Kind, k.Name, k.Namespace = r.Kind, r.Name, r.Namespace
			}
			seeds[k] = Seed{Status: metav1.ConditionStatus(c.Status), Reason: c.Reason, LastTransition: c.LastTransitionTime.Time}
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
func (e *Engine) Evaluate() map[string]*status.Component {
	e.evalMu.Lock()
	defer e.evalMu.Unlock()
	start := time.Now()
	now := e.clock.Now()
	var out map[string]*status.Component
	var observed map[string]time.Time
	unchanged := false
	var cf *ClusterFacts
	if e.cluster != nil {
		cf = e.cluster(now)
	}
	sameCluster := cf == nil || (cf.Gen == e.clusterGen && cf.Fresh(now) == e.clusterFresh)
	var bf *BudgetFacts
	if e.budget != nil {
		bf = e.budget()
	}
	sameBudget := e.budget == nil || (bf.gen() == e.budgetGen && bf.Fresh(now) == e.budgetFresh)
	if e.latest != nil && !e.alwaysRecompute && !e.damper.Holding() && sameCluster && sameBudget {
		e.state.ReadChanged(e.changes, func(nodes map[string]state.Entry, changed map[string]struct{}) {
			observed, unchanged = e.cache.UnchangedSince(nodes, changed, now, e.cfg)
		})
	}
	if cf != nil {
		e.clusterGen, e.clusterFresh = cf.Gen, cf.Fresh(now)
	}
	if e.budget != nil {
		e.budgetGen, e.budgetFresh = bf.gen(), bf.Fresh(now)
	}
	if unchanged {
		out = Retime(e.latest, observed, now, e.cfg)
		if cf.Fresh(now) {
			_, agents := observed[cf.Component]
			ClampCluster(out[cf.Component], cf, !agents, e.cfg)
		}
		for _, comp := range report.NodeComponents {
			e.pub.Retime(e.namespace, out[comp])
		}
		if e.metrics != nil {
			e.metrics.ObserveRollup(metrics.RollupRetimed, time.Since(start))
		}
	} else {
		out = e.recompute(e.state.Snapshot(), now, cf, bf)
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
// stamping, published.
func (e *Engine) recompute(snap state.Snapshot, now time.Time, cf *ClusterFacts, bf *BudgetFacts) map[string]*status.Component {
	out := ComputeCached(snap, now, e.cfg, e.cache)
	if cf != nil {
		MergeCluster(out[cf.Component], cf, now, e.cfg)
	}
	if cs := out[report.ComponentNode]; e.budget != nil && cs != nil {
		cs.Conditions = append(cs.Conditions, BudgetCondition(bf, now))
	}
	for _, comp := range report.NodeComponents {
		cs := out[comp]
		e.damper.Apply(cs, now)
		Compact(cs, e.maxListed)
		e.damper.Stamp(cs, now)
		e.pub.Publish(e.namespace, cs)
	}
	return out
}

// Latest is the last published rollup (nil before the first). Callers must
// not modify it.
func (e *Engine) Latest() map[string]*status.Component {
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

// Package drainserver serves the drain check whose rules are package
// drain's: the Service (a cached snapshot of the aggregator's state and
// drain.Evaluate on it), its HTTP and gRPC front ends, their delegated
// authentication, and the disruption budget (every node's reboot verdict,
// exported as a metric and served over HTTP).
//
// Serving (service.go, http.go, grpc.go): a check answers from a snapshot
// holding every report the aggregator's state had accepted, and every Node
// cordon and role change its informer had delivered, when the check
// arrived (Config.Generation), and no older than Config.MaxSnapshotAge
// (1s); when the cached snapshot is not, the Service takes one
// (incrementally: drain.Indexer), one at a time, each serving every check that
// arrived before it began, and keeps one warm in the background while
// checks come, so one check reads only the target's resources and the
// raft members. GET /v1/drain-check?node=X answers JSON
// (400 bad node name, 404 unknown node); DrainService.DrainCheck answers the
// same over gRPC (InvalidArgument, NotFound). Every answer and refusal is
// counted (cozy_health_drain_checks_total, cozy_health_drain_rejected_total).
//
// Authentication (auth.go): by default the check is served like the
// aggregator's other HTTP endpoints, without its own authentication; in a
// cluster it is reached through the Kubernetes API service proxy, where the
// apiserver authenticates the user and authorizes get on services/proxy.
// The optional Authorizer (--drain-auth=delegated in the
// aggregator) checks a bearer token with a TokenReview and a
// SubjectAccessReview for get on nonResourceURL /v1/drain-check; it is for
// direct callers, since the service proxy strips the caller's token.
package drainserver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/clock"

	"github.com/cozystack/cozy-health/aggregator/internal/drain"
	"github.com/cozystack/cozy-health/aggregator/internal/quorum"
	"github.com/cozystack/cozy-health/pkg/linstorapi"
)

// Errors of Service.Check; the HTTP and gRPC front ends map them to 400 /
// InvalidArgument and 404 / NotFound.
var (
	// errInvalidNode: the node name is empty or not a valid Node name.
	errInvalidNode = errors.New("invalid node name")
	// errNodeNotFound: the node is neither a Kubernetes Node nor in the
	// aggregator's state.
	errNodeNotFound = errors.New("node not found")
)

// Source returns every node's drain.NodeInfo at now: in the aggregator,
// drain.StateNodes over the state and the Kubernetes Nodes. The Service
// indexes it incrementally (drain.Indexer).
type Source func(now time.Time) map[string]drain.NodeInfo

// ControllerView returns the LINSTOR controller's view as the aggregator
// read it itself (every replica, every satellite and its storage pools),
// or why it is not current at now.
type ControllerView func() (view linstorapi.Placement, why string)

// Config configures a Service.
type Config struct {
	// Generation counts the changes of what Source reads: it only grows,
	// and has grown by the time a change can be read. In the aggregator it
	// is the state's generation (state.State.Generation: every report
	// accepted, every node expected, re-roled or pruned) plus the Node
	// informer's cordon and role changes. A check reads it on arrival and
	// answers only from a snapshot taken after the same or a later count,
	// taking one if need be: an answer is never older than a report the
	// state had accepted when the check arrived, however young the cached
	// snapshot. Nil: Source changes only with time (tests, benchmarks), and
	// MaxSnapshotAge alone decides.
	Generation func() uint64
	// MaxSnapshotAge is how old a cached snapshot may be before a check
	// takes a new one even when Generation has not moved (for what it does
	// not count: the LINSTOR controller's view); 0 means 1s. Freshness is
	// still judged at the time of the check (NodeInfo.FreshUntil).
	MaxSnapshotAge time.Duration
	// Auditor counts and logs the claims the rules reject (DRBD replica
	// claims no other holder corroborates); nil drops them. The raft
	// claims are the same the rollup reads and audits.
	Auditor *quorum.Auditor
	// Linstor, when set, is the LINSTOR controller's view the aggregator
	// reads itself; the LINSTOR rules read replicas from it instead of the
	// agents' reports.
	Linstor ControllerView
}

// Validate refuses values the service cannot run with.
func (c *Config) Validate() error {
	if c.MaxSnapshotAge < 0 {
		return fmt.Errorf("drain: MaxSnapshotAge must be >= 0, got %s", c.MaxSnapshotAge)
	}
	if c.MaxSnapshotAge == 0 {
		c.MaxSnapshotAge = time.Second
	}
	return nil
}

// Service answers drain checks from cached snapshots of a Source. It is
// safe for concurrent use.
//
// A check answers from a snapshot that holds every change Config.Generation
// counted when the check arrived and is no older than
// Config.MaxSnapshotAge; when the cached one is not, the check takes a new
// one (incrementally: drain.Indexer) or waits for the one being taken. Snapshots
// are taken one at a time, and one serves every check that arrived before
// it began, so a flood of checks costs at most one snapshot in progress
// whatever the rate of checks, and none while the state does not change.
type Service struct {
	cfg    Config
	source Source
	clock  clock.PassiveClock
	log    *zap.Logger
	// rejectLog is log sampled: a flood of bad requests costs a few
	// lines a second, the counter counts them all.
	rejectLog *zap.Logger
	m         *metrics

	// cur is the latest snapshot; mu serializes taking a new one and
	// guards indexer.
	cur     atomic.Pointer[cached]
	mu      sync.Mutex
	indexer drain.Indexer
	// lastCheck is when a check was last served (unix nanoseconds); Run
	// keeps snapshots warm only while checks keep coming.
	lastCheck atomic.Int64
}

// warmFor is how long after the last check Run keeps the snapshot warm. An
// idle aggregator (no drain checks) spends nothing on snapshots; the first
// check after a quiet spell takes one itself (tens of milliseconds at
// 5,000 nodes), the ones after it find it ready.
const warmFor = 2 * time.Minute

// NewService returns a Service reading source. reg may be nil.
func NewService(cfg Config, source Source, clk clock.PassiveClock, log *zap.Logger, reg prometheus.Registerer) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if source == nil {
		return nil, errors.New("drain: nil source")
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	if log == nil {
		log = zap.NewNop()
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	log = log.With(zap.String("component", "drain"))
	return &Service{cfg: cfg, source: source, clock: clk, log: log, rejectLog: sampled(log), m: m}, nil
}

// cached is a snapshot and the generation (Config.Generation) read before
// its source was: it holds at least every change counted up to gen.
type cached struct {
	snap *drain.Snapshot
	gen  uint64
}

// serves tells whether c may answer a check at now that arrived when the
// generation was gen: it holds every change counted by then, and it is at
// most maxAge old (and not from now's future).
func (c *cached) serves(now time.Time, gen uint64, maxAge time.Duration) bool {
	return c != nil && c.gen >= gen && !now.Before(c.snap.TakenAt) && now.Sub(c.snap.TakenAt) <= maxAge
}

// generation is Config.Generation's count; 0 without one.
func (s *Service) generation() uint64 {
	if s.cfg.Generation == nil {
		return 0
	}
	return s.cfg.Generation()
}

// Snapshot returns a snapshot that holds every change Config.Generation
// counted when it was called and is no older than MaxSnapshotAge at now.
// While another caller (usually Run) is taking one, a snapshot holding
// every change counted but up to 5 x MaxSnapshotAge old is returned rather
// than waited for, so checks do not queue behind a rebuild for what only
// age would change; a snapshot missing a counted change is never returned:
// the caller waits for the one being taken, and takes another if that one
// began before the change.
func (s *Service) Snapshot(now time.Time) *drain.Snapshot {
	gen := s.generation()
	c := s.cur.Load()
	if c.serves(now, gen, s.cfg.MaxSnapshotAge) {
		return c.snap
	}
	if !s.mu.TryLock() {
		if c.serves(now, gen, 5*s.cfg.MaxSnapshotAge) {
			return c.snap
		}
		s.mu.Lock()
	}
	defer s.mu.Unlock()
	if c := s.cur.Load(); c.serves(now, gen, s.cfg.MaxSnapshotAge) {
		return c.snap
	}
	start := time.Now()
	// Read before the source: every change counted up to taken is in what
	// the source reads next.
	taken := s.generation()
	snap := s.indexer.Snapshot(s.source(now), now)
	if s.cfg.Linstor != nil {
		snap = snap.WithPlacement(s.cfg.Linstor())
	}
	s.m.snapshotSeconds.Observe(time.Since(start).Seconds())
	s.cur.Store(&cached{snap: snap, gen: taken})
	return snap
}

// Run keeps the cached snapshot younger than MaxSnapshotAge, and holding
// the changes counted by then, until ctx ends, while checks arrive (see
// warmFor), so that checks pay for taking one only for the changes of the
// last tick (an incremental snapshot).
func (s *Service) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.MaxSnapshotAge * 4 / 5)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			now := s.clock.Now()
			if now.Sub(time.Unix(0, s.lastCheck.Load())) > warmFor {
				continue
			}
			s.Snapshot(now)
		}
	}
}

// Check evaluates every rule for node now, for a reboot. Bad input is
// counted and logged.
func (s *Service) Check(node, via string) (drain.Result, error) {
	return s.CheckIntent(node, via, drain.IntentReboot)
}

// CheckIntent evaluates every rule of RulesFor(intent) for node now. Bad
// input is counted and logged.
func (s *Service) CheckIntent(node, via string, intent drain.Intent) (drain.Result, error) {
	if node == "" || len(validation.IsDNS1123Subdomain(node)) > 0 {
		s.reject(via, "invalid_node", node)
		return drain.Result{}, fmt.Errorf("%w: %q is not a valid Node name", errInvalidNode, node)
	}
	start := time.Now()
	now := s.clock.Now()
	s.lastCheck.Store(now.UnixNano())
	snap := s.Snapshot(now)
	if !snap.Known(node) {
		s.reject(via, "not_found", node)
		return drain.Result{}, fmt.Errorf("%w: %s is neither a Kubernetes Node nor reported by an agent", errNodeNotFound, node)
	}
	res := drain.EvaluateIntent(node, intent, snap, now)
	for _, r := range res.Reasons {
		for _, rej := range r.Rejected() {
			s.cfg.Auditor.Reject(rej, r.Rule+" "+node)
		}
	}
	s.m.checks.WithLabelValues(via, string(res.Verdict)).Inc()
	s.m.checkSeconds.Observe(time.Since(start).Seconds())
	s.log.Info("drain check", zap.String("node", node), zap.String("via", via), zap.String("intent", string(intent)), zap.String("verdict", string(res.Verdict)), zap.Int("reasons", len(res.Reasons)))
	return res, nil
}

func (s *Service) reject(via, reason, node string) {
	s.m.rejected.WithLabelValues(via, reason).Inc()
	s.rejectLog.Warn("drain check rejected", zap.String("via", via), zap.String("reason", reason), zap.String("node", node))
}

// Sampling of the rejection log: the first rejectLogFirst lines of each
// second, then one in rejectLogThereafter.
const (
	rejectLogFirst      = 5
	rejectLogThereafter = 100
)

// sampled returns log sampled per second (zapcore's sampler).
func sampled(log *zap.Logger) *zap.Logger {
	return log.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return zapcore.NewSamplerWithOptions(c, time.Second, rejectLogFirst, rejectLogThereafter)
	}))
}

// metrics are the drain check's Prometheus metrics.
type metrics struct {
	checks          *prometheus.CounterVec
	rejected        *prometheus.CounterVec
	checkSeconds    prometheus.Histogram
	snapshotSeconds prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "cozy_health", Subsystem: "drain", Name: "checks_total",
			Help: "Drain checks answered, by front end (http, grpc) and verdict."}, []string{"via", "verdict"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "cozy_health", Subsystem: "drain", Name: "rejected_total",
			Help: "Drain checks refused, by front end and reason (invalid_node, invalid_intent, not_found, unauthenticated, forbidden, throttled, method)."}, []string{"via", "reason"}),
		checkSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "cozy_health", Subsystem: "drain", Name: "check_duration_seconds",
			Help: "Time to answer one drain check.", Buckets: prometheus.ExponentialBuckets(0.00005, 2, 14)}),
		snapshotSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "cozy_health", Subsystem: "drain", Name: "snapshot_duration_seconds",
			Help: "Time to take and index one state snapshot.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.checks, m.rejected, m.checkSeconds, m.snapshotSeconds} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register drain metrics: %w", err)
			}
		}
	}
	return m, nil
}

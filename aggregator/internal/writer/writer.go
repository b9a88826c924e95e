// Package writer publishes the rollup as Health objects. It runs only on
// the Lease holder: Run is started in OnStartedLeading and returns when that
// context is cancelled. Writes are server-side applies with one field
// manager, coalesced per object through a workqueue (many rollups collapse
// into one write), bounded by a token bucket, retried with exponential
// backoff, and repeated every refresh period so freshUntil never lapses
// while the leader is alive.
package writer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/cozystack/cozy-health/aggregator/internal/metrics"
	"github.com/cozystack/cozy-health/aggregator/internal/rollup"
	ac "github.com/cozystack/cozy-health/pkg/applyconfiguration/health/v1alpha1"
	"github.com/cozystack/cozy-health/pkg/client/clientset/versioned"
	"github.com/cozystack/cozy-health/pkg/client/clientset/versioned/scheme"
)

// FieldManager is the one field manager of every aggregator write.
const FieldManager = "cozy-health-aggregator"

// workers is how many objects are written at once.
const workers = 3

// Config configures the writer.
type Config struct {
	// Namespace holds the Health objects.
	Namespace string
	// FreshFor is written as spec.sla.freshFor.
	FreshFor time.Duration
	// RefreshPeriod: an object unchanged for this long is written again.
	RefreshPeriod time.Duration
	// WritesPerSecond and WriteBurst are the token bucket.
	WritesPerSecond float64
	WriteBurst      int
	// BackoffBase and BackoffMax bound the per-object retry backoff.
	BackoffBase, BackoffMax time.Duration
}

// Writer holds the latest desired status of every component and, while
// Run runs, writes it.
type Writer struct {
	cfg     Config
	client  versioned.Interface
	metrics *metrics.Metrics
	log     *zap.Logger
	clock   clock.WithTicker

	// runMu serializes Run: a new term never overlaps the previous one.
	runMu sync.Mutex

	// mu guards everything below.
	mu sync.Mutex
	// desired is the latest desired status per component, with its
	// fingerprint (everything but observedAt, freshUntil and lastReportAt).
	desired map[string]desiredEntry
	// written is, per component, what the current term last wrote.
	written map[string]writtenEntry
	// queue is non-nil while Run runs.
	queue workqueue.TypedRateLimitingInterface[string]
}

type desiredEntry struct {
	cs *rollup.ComponentStatus
	fp uint64
}

type writtenEntry struct {
	fp uint64
	at time.Time
}

// New returns a Writer; it writes nothing until Run.
func New(cfg Config, client versioned.Interface, m *metrics.Metrics, log *zap.Logger, clk clock.WithTicker) (*Writer, error) {
	if cfg.Namespace == "" {
		return nil, errors.New("writer: namespace is required")
	}
	if cfg.RefreshPeriod <= 0 || cfg.WritesPerSecond <= 0 || cfg.WriteBurst < 1 {
		return nil, fmt.Errorf("writer: refresh period, writes per second and burst must be positive")
	}
	if cfg.BackoffBase <= 0 {
		cfg.BackoffBase = 250 * time.Millisecond
	}
	if cfg.BackoffMax <= 0 {
		cfg.BackoffMax = 8 * time.Second
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Writer{
		cfg: cfg, client: client, metrics: m, log: log.With(zap.String("component", "writer")), clock: clk,
		desired: map[string]desiredEntry{}, written: map[string]writtenEntry{},
	}, nil
}

// Update records the desired status of one component (already damped and
// compacted) and, while leading, queues a write when it changed or when
// the last write is older than the refresh period.
func (w *Writer) Update(cs *rollup.ComponentStatus) {
	w.update(cs, Fingerprint(cs))
}

// Retimed records a status that differs from the last one Update or
// Retimed recorded for its component only in observedAt and freshUntil
// (rollup.Retime): its fingerprint is the last one, so it is written only
// by the refresh.
func (w *Writer) Retimed(cs *rollup.ComponentStatus) {
	w.mu.Lock()
	d, ok := w.desired[cs.Component]
	w.mu.Unlock()
	if !ok {
		w.Update(cs)
		return
	}
	w.update(cs, d.fp)
}

func (w *Writer) update(cs *rollup.ComponentStatus, fp uint64) {
	now := w.clock.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.desired[cs.Component] = desiredEntry{cs: cs, fp: fp}
	if w.queue == nil {
		return
	}
	if w.queue.NumRequeues(cs.Component) > 0 {
		// A failed write is already scheduled with backoff; it will write
		// this newest status. Adding it now would bypass the backoff.
		return
	}
	last, ok := w.written[cs.Component]
	if !ok || last.fp != fp || now.Sub(last.at) >= w.refreshPeriodOf(cs.Component) {
		w.queue.Add(cs.Component)
	}
}

// Run writes until ctx is cancelled: every known component at once, then on
// change and refresh.
func (w *Writer) Run(ctx context.Context) {
	w.runMu.Lock()
	defer w.runMu.Unlock()
	q := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](w.cfg.BackoffBase, w.cfg.BackoffMax),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "health-writer", Clock: w.clock},
	)
	w.mu.Lock()
	w.queue = q
	w.written = map[string]writtenEntry{}
	for comp := range w.desired {
		q.Add(comp)
	}
	w.mu.Unlock()
	w.log.Info("writer started")

	limiter := rate.NewLimiter(rate.Limit(w.cfg.WritesPerSecond), w.cfg.WriteBurst)
	specDone := map[string]bool{}
	done := make(chan struct{})
	// Several workers, so a changed object is not queued behind slow
	// refreshes of the others; the workqueue never hands one object to two
	// workers, and the token bucket bounds them together.
	var wg sync.WaitGroup
	var specMu sync.Mutex
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for w.processNext(ctx, q, limiter, specDone, &specMu) {
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()
	<-ctx.Done()
	w.mu.Lock()
	w.queue = nil
	w.mu.Unlock()
	q.ShutDown()
	<-done
	w.log.Info("writer stopped")
}

func (w *Writer) processNext(ctx context.Context, q workqueue.TypedRateLimitingInterface[string], limiter *rate.Limiter, specDone map[string]bool, specMu *sync.Mutex) bool {
	comp, shutdown := q.Get()
	if shutdown {
		return false
	}
	defer q.Done(comp)
	if err := limiter.Wait(ctx); err != nil {
		return ctx.Err() == nil
	}
	w.mu.Lock()
	d, ok := w.desired[comp]
	w.mu.Unlock()
	if !ok {
		q.Forget(comp)
		return true
	}
	start := time.Now()
	err := w.write(ctx, d.cs, specDone, specMu)
	took := time.Since(start)
	if err != nil {
		if ctx.Err() != nil {
			return false
		}
		w.metrics.Write(metrics.WriteError, took)
		w.log.Warn("write Health status", zap.String("health", comp), zap.Int("retries", q.NumRequeues(comp)), zap.Error(err))
		q.AddRateLimited(comp)
		return true
	}
	w.metrics.Write(metrics.WriteSuccess, took)
	w.log.Debug("wrote Health status", zap.String("health", comp), zap.Duration("took", took))
	q.Forget(comp)
	w.mu.Lock()
	w.written[comp] = writtenEntry{fp: d.fp, at: w.clock.Now()}
	w.mu.Unlock()
	return true
}

// write applies the object's spec (once per term, or again after the object
// vanished) and its status.
func (w *Writer) write(ctx context.Context, cs *rollup.ComponentStatus, specDone map[string]bool, specMu *sync.Mutex) error {
	healths := w.client.HealthV1alpha1().Healths(w.cfg.Namespace)
	opts := metav1.ApplyOptions{FieldManager: FieldManager, Force: true}
	specMu.Lock()
	done := specDone[cs.Component]
	specMu.Unlock()
	if !done {
		if _, err := healths.Apply(ctx, specApply(w.cfg.Namespace, cs.Component, metav1.Duration{Duration: w.cfg.FreshFor}), opts); err != nil {
			return fmt.Errorf("apply Health %s/%s spec: %w", w.cfg.Namespace, cs.Component, err)
		}
		specMu.Lock()
		specDone[cs.Component] = true
		specMu.Unlock()
	}
	if err := w.applyStatus(ctx, statusApply(w.cfg.Namespace, cs), opts); err != nil {
		if apierrors.IsNotFound(err) {
			specMu.Lock()
			delete(specDone, cs.Component)
			specMu.Unlock()
		}
		return fmt.Errorf("apply Health %s/%s status: %w", w.cfg.Namespace, cs.Component, err)
	}
	return nil
}

// applyStatus is HealthInterface.ApplyStatus without decoding the answer:
// the apiserver returns the whole object (every node of a 5,000-node
// component), which the writer never reads; decoding it was most of the
// writer's allocations.
func (w *Writer) applyStatus(ctx context.Context, h *ac.HealthApplyConfiguration, opts metav1.ApplyOptions) error {
	body, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("encode status: %w", err)
	}
	po := opts.ToPatchOptions()
	return w.client.HealthV1alpha1().RESTClient().Patch(types.ApplyPatchType).
		Namespace(*h.Namespace).Resource("healths").Name(*h.Name).SubResource("status").
		VersionedParams(&po, scheme.ParameterCodec).
		Body(body).Do(ctx).Error()
}

// Fingerprint hashes what makes a status different for readers: everything
// but observedAt, freshUntil and the nodes' lastReportAt, which move on
// every report and are brought up to date by the refresh instead. Node
// entries are hashed one by one and summed, so map order does not matter
// and nothing is sorted.
func Fingerprint(cs *rollup.ComponentStatus) uint64 {
	h := fnv.New64a()
	put := func(parts ...string) {
		for _, p := range parts {
			_, _ = io.WriteString(h, p)
			_, _ = h.Write([]byte{0})
		}
	}
	put(cs.Component, cs.Overall.String(), strconv.Itoa(cs.Issues))
	for _, n := range cs.DegradedNodes {
		put(n)
	}
	for _, c := range cs.Conditions {
		put(c.Type, c.Severity.String(), c.Reason, c.Message, c.Node, c.ResourceKey(), strconv.FormatInt(c.LastTransition.Unix(), 10))
	}
	sum := h.Sum64()
	for n, ns := range cs.Nodes {
		h.Reset()
		put(n, ns.Status.String(), ns.Reason, ns.Message)
		sum += h.Sum64()
	}
	return sum
}

// refreshPeriodOf staggers the refresh periods of the objects (between 75 %
// and 100 % of the configured period, by name) so refreshes drift apart
// instead of arriving at the apiserver together.
func (w *Writer) refreshPeriodOf(component string) time.Duration {
	h := fnv.New32a()
	_, _ = io.WriteString(h, component)
	return w.cfg.RefreshPeriod - time.Duration(h.Sum32()%256)*w.cfg.RefreshPeriod/1024
}

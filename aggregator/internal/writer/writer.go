// Package writer publishes the rollup as Health objects. It runs only on
// the Lease holder: Run is started in OnStartedLeading and returns when that
// context is cancelled. Writes are server-side applies with one field
// manager, coalesced per object through a workqueue (many rollups collapse
// into one write), bounded by a token bucket, retried with exponential
// backoff, and repeated every refresh period so freshUntil never lapses
// while the leader is alive.
//
// The Writer is a status.Publisher. Node components live in the platform
// namespace. The cluster adapters publish into any namespace and withdraw
// objects they no longer have facts for (Remove): those objects carry the
// label SourceLabel, and at the start of every term, once the adapters have
// published their first answer (AdaptersReady), the leader deletes every
// labelled object no adapter publishes, so objects left by an earlier
// leader do not linger.
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
	"github.com/cozystack/cozy-health/aggregator/internal/status"
	ac "github.com/cozystack/cozy-health/pkg/applyconfiguration/health/v1alpha1"
	"github.com/cozystack/cozy-health/pkg/client/clientset/versioned"
	"github.com/cozystack/cozy-health/pkg/client/clientset/versioned/scheme"
)

// SourceLabel marks the Health objects the cluster adapters publish (value
// SourceAdapters); the writer prunes labelled objects no adapter publishes.
const SourceLabel = "health.cozystack.io/source"

// SourceAdapters is SourceLabel's value on adapter objects.
const SourceAdapters = "cluster-adapters"

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
	// Adapter objects (status.FromAdapters): AdapterFreshFor is their spec.sla.freshFor
	// and AdapterRefreshPeriod their refresh (default: FreshFor and
	// RefreshPeriod). Their writes have a token bucket of their own
	// (AdapterWritesPerSecond, default WritesPerSecond; burst WriteBurst), so
	// hundreds of tenant objects never delay a node component's write.
	AdapterFreshFor        time.Duration
	AdapterRefreshPeriod   time.Duration
	AdapterWritesPerSecond float64
}

// Key names one Health object.
type Key struct {
	Namespace, Component string
}

func (k Key) String() string { return k.Namespace + "/" + k.Component }

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
	// desired is the latest desired status per object, with its
	// fingerprint (everything but observedAt, freshUntil and lastReportAt).
	desired map[Key]desiredEntry
	// written is, per object, what the current term last wrote.
	written map[Key]writtenEntry
	// removed are adapter objects to delete (no desired entry).
	removed map[Key]bool
	// adaptersReady is closed by AdaptersReady.
	adaptersReady chan struct{}
	readyOnce     sync.Once
	// queue is non-nil while Run runs.
	queue workqueue.TypedRateLimitingInterface[Key]
	// boundLogged throttles the log of conditions dropped or cut, per
	// object.
	boundLogged map[Key]boundLog
}

type desiredEntry struct {
	cs *status.Component
	fp uint64
	// adapter marks an adapter object (labelled, its own freshness).
	adapter bool
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
	if cfg.AdapterFreshFor <= 0 {
		cfg.AdapterFreshFor = cfg.FreshFor
	}
	if cfg.AdapterRefreshPeriod <= 0 {
		cfg.AdapterRefreshPeriod = cfg.RefreshPeriod
	}
	if cfg.AdapterWritesPerSecond <= 0 {
		cfg.AdapterWritesPerSecond = cfg.WritesPerSecond
	}
	return &Writer{
		cfg: cfg, client: client, metrics: m, log: log.With(zap.String("component", "writer")), clock: clk,
		desired: map[Key]desiredEntry{}, written: map[Key]writtenEntry{}, removed: map[Key]bool{},
		adaptersReady: make(chan struct{}), boundLogged: map[Key]boundLog{},
	}, nil
}

var _ status.Publisher = (*Writer)(nil)

// Publish records the desired status of the object namespace/cs.Component
// (status.Publisher) and, while leading, queues a write when it changed or
// when the last write is older than the refresh period (the adapters'
// objects, cs.Source FromAdapters, have their own).
func (w *Writer) Publish(namespace string, cs *status.Component) {
	w.publish(namespace, cs, Fingerprint(cs))
}

// Retime records a status that differs from the last one published for
// its object only in observedAt and freshUntil (rollup.Retime): its
// fingerprint is the last one, so it is written only by the refresh.
func (w *Writer) Retime(namespace string, cs *status.Component) {
	w.mu.Lock()
	d, ok := w.desired[Key{namespace, cs.Component}]
	w.mu.Unlock()
	if !ok {
		w.Publish(namespace, cs)
		return
	}
	w.publish(namespace, cs, d.fp)
}

func (w *Writer) publish(namespace string, cs *status.Component, fp uint64) {
	k := Key{namespace, cs.Component}
	adapter := cs.Source == status.FromAdapters
	w.mu.Lock()
	defer w.mu.Unlock()
	if adapter {
		delete(w.removed, k)
	}
	w.desired[k] = desiredEntry{cs: cs, fp: fp, adapter: adapter}
	w.enqueueLocked(k, fp)
}

// Remove withdraws an adapter object: the leader deletes it.
func (w *Writer) Remove(namespace, component string) {
	k := Key{namespace, component}
	w.mu.Lock()
	defer w.mu.Unlock()
	d, ok := w.desired[k]
	if ok && !d.adapter {
		return
	}
	delete(w.desired, k)
	delete(w.written, k)
	w.removed[k] = true
	if w.queue != nil {
		w.queue.Add(k)
	}
}

// AdaptersReady says the adapters have published their first complete
// answer: from then on the leader prunes labelled objects they do not
// publish.
func (w *Writer) AdaptersReady() {
	w.readyOnce.Do(func() { close(w.adaptersReady) })
}

// enqueueLocked queues k when it changed or its refresh is due. w.mu held.
func (w *Writer) enqueueLocked(k Key, fp uint64) {
	if w.queue == nil {
		return
	}
	if w.queue.NumRequeues(k) > 0 {
		// A failed write is already scheduled with backoff; it will write
		// this newest status. Adding it now would bypass the backoff.
		return
	}
	if w.dueLocked(k, desiredEntry{fp: fp, adapter: w.desired[k].adapter}) {
		w.queue.Add(k)
	}
}

// dueLocked tells whether d differs from what this term last wrote of k,
// or k's refresh is due. w.mu held.
func (w *Writer) dueLocked(k Key, d desiredEntry) bool {
	last, ok := w.written[k]
	return !ok || last.fp != d.fp || w.clock.Now().Sub(last.at) >= w.refreshPeriodOf(k, d.adapter)
}

// Run writes until ctx is cancelled: every known component at once, then on
// change and refresh.
func (w *Writer) Run(ctx context.Context) {
	w.runMu.Lock()
	defer w.runMu.Unlock()
	q := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[Key](w.cfg.BackoffBase, w.cfg.BackoffMax),
		workqueue.TypedRateLimitingQueueConfig[Key]{Name: "health-writer", Clock: w.clock},
	)
	w.mu.Lock()
	w.queue = q
	w.written = map[Key]writtenEntry{}
	for k := range w.desired {
		q.Add(k)
	}
	for k := range w.removed {
		q.Add(k)
	}
	w.mu.Unlock()
	w.log.Info("writer started")

	limiters := limiters{
		node:    rate.NewLimiter(rate.Limit(w.cfg.WritesPerSecond), w.cfg.WriteBurst),
		adapter: rate.NewLimiter(rate.Limit(w.cfg.AdapterWritesPerSecond), w.cfg.WriteBurst),
	}
	specDone := map[Key]bool{}
	pruneDone := make(chan struct{})
	go func() {
		defer close(pruneDone)
		select {
		case <-ctx.Done():
		case <-w.adaptersReady:
			w.pruneOrphans(ctx, q)
		}
	}()
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
			for w.processNext(ctx, q, limiters, specDone, &specMu) {
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
	<-pruneDone
	w.log.Info("writer stopped")
}

type limiters struct{ node, adapter *rate.Limiter }

// pruneOrphans queues the deletion of every labelled object no adapter
// publishes (left by an earlier leader, or published before a restart for
// facts that are gone).
func (w *Writer) pruneOrphans(ctx context.Context, q workqueue.TypedRateLimitingInterface[Key]) {
	list, err := w.client.HealthV1alpha1().Healths(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		LabelSelector: SourceLabel + "=" + SourceAdapters,
	})
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("list adapter Health objects to prune those without facts", zap.Error(err))
		}
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.queue == nil {
		return
	}
	n := 0
	for _, h := range list.Items {
		k := Key{h.Namespace, h.Name}
		if _, ok := w.desired[k]; ok {
			continue
		}
		w.removed[k] = true
		q.Add(k)
		n++
	}
	w.log.Info("pruning adapter Health objects without facts", zap.Int("objects", n))
}

func (w *Writer) processNext(ctx context.Context, q workqueue.TypedRateLimitingInterface[Key], lim limiters, specDone map[Key]bool, specMu *sync.Mutex) bool {
	k, shutdown := q.Get()
	if shutdown {
		return false
	}
	defer q.Done(k)
	w.mu.Lock()
	d, ok := w.desired[k]
	remove := !ok && w.removed[k]
	due := remove || (ok && w.dueLocked(k, d))
	w.mu.Unlock()
	if !ok && !remove {
		q.Forget(k)
		return true
	}
	if !due {
		// Queued again while a worker wrote it (the workqueue re-adds an
		// object changed during its write), and that write already carried
		// the change: another write would spend a token on nothing.
		q.Forget(k)
		return true
	}
	limiter := lim.node
	if remove || d.adapter {
		limiter = lim.adapter
	}
	if err := limiter.Wait(ctx); err != nil {
		return ctx.Err() == nil
	}
	// The newest desired status, not the one read before the wait: the
	// wait lasts up to workers/WritesPerSecond when the bucket is empty, and
	// a rollup that changed the object meanwhile (a node falling silent
	// changes every object at once) is written by this write instead of
	// one more turn of the queue.
	w.mu.Lock()
	d, ok = w.desired[k]
	remove = !ok && w.removed[k]
	w.mu.Unlock()
	if !ok && !remove {
		q.Forget(k)
		return true
	}
	start := time.Now()
	var err error
	if remove {
		err = w.delete(ctx, k)
		specMu.Lock()
		delete(specDone, k)
		specMu.Unlock()
	} else {
		err = w.write(ctx, k, d, specDone, specMu)
	}
	took := time.Since(start)
	if err != nil {
		if ctx.Err() != nil {
			return false
		}
		w.metrics.Write(metrics.WriteError, took)
		w.mu.Lock()
		// What the object holds now is not known: write it again whatever
		// its fingerprint.
		delete(w.written, k)
		w.mu.Unlock()
		w.log.Warn("write Health object", zap.Stringer("health", k), zap.Int("retries", q.NumRequeues(k)), zap.Error(err))
		q.AddRateLimited(k)
		return true
	}
	w.metrics.Write(metrics.WriteSuccess, took)
	q.Forget(k)
	w.mu.Lock()
	if remove {
		if _, back := w.desired[k]; !back {
			delete(w.removed, k)
		}
		w.log.Debug("deleted Health object without facts", zap.Stringer("health", k), zap.Duration("took", took))
	} else {
		w.written[k] = writtenEntry{fp: d.fp, at: w.clock.Now()}
		w.log.Debug("wrote Health status", zap.Stringer("health", k), zap.Duration("took", took))
	}
	w.mu.Unlock()
	return true
}

// delete deletes an adapter object; one already gone is deleted.
func (w *Writer) delete(ctx context.Context, k Key) error {
	err := w.client.HealthV1alpha1().Healths(k.Namespace).Delete(ctx, k.Component, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete Health %s: %w", k, err)
	}
	return nil
}

// write applies the object's spec (once per term, or again after the object
// vanished) and its status.
func (w *Writer) write(ctx context.Context, k Key, d desiredEntry, specDone map[Key]bool, specMu *sync.Mutex) error {
	healths := w.client.HealthV1alpha1().Healths(k.Namespace)
	opts := metav1.ApplyOptions{FieldManager: FieldManager, Force: true}
	specMu.Lock()
	done := specDone[k]
	specMu.Unlock()
	if !done {
		var spec *ac.HealthApplyConfiguration
		if d.adapter {
			spec = adapterSpecApply(k.Namespace, k.Component, metav1.Duration{Duration: w.cfg.AdapterFreshFor}, d.cs.MaxAge)
		} else {
			spec = specApply(k.Namespace, k.Component, metav1.Duration{Duration: w.cfg.FreshFor})
		}
		if _, err := healths.Apply(ctx, spec, opts); err != nil {
			return fmt.Errorf("apply Health %s spec: %w", k, err)
		}
		specMu.Lock()
		specDone[k] = true
		specMu.Unlock()
	}
	// A condition outside the CRD's bounds is dropped or cut, and node
	// entries over the size budget shortened, counted and logged, instead
	// of the apiserver refusing the whole status.
	cs, bounded := boundStatus(d.cs)
	w.countBounded(k, bounded)
	if err := w.applyStatus(ctx, statusApply(k.Namespace, cs), opts); err != nil {
		if apierrors.IsNotFound(err) {
			specMu.Lock()
			delete(specDone, k)
			specMu.Unlock()
		}
		return fmt.Errorf("apply Health %s status: %w", k, err)
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
func Fingerprint(cs *status.Component) uint64 {
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
		if b := c.Backup; b != nil {
			// observedAge moves with observedAt and is refreshed with it.
			put(strconv.FormatInt(b.LastSuccessfulAt.Unix(), 10), b.MaxAge.String())
		}
	}
	sum := h.Sum64() ^ uint64(cs.MaxAge)
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
func (w *Writer) refreshPeriodOf(k Key, adapter bool) time.Duration {
	h := fnv.New32a()
	_, _ = io.WriteString(h, k.Namespace)
	_, _ = io.WriteString(h, k.Component)
	p := w.cfg.RefreshPeriod
	if adapter {
		p = w.cfg.AdapterRefreshPeriod
	}
	return p - time.Duration(h.Sum32()%256)*p/1024
}

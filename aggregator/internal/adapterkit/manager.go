package adapterkit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"runtime/debug"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/cozystack/cozy-health/aggregator/internal/metrics"
	"github.com/cozystack/cozy-health/aggregator/internal/status"
	"github.com/cozystack/cozy-health/pkg/report"
)

var (
	crdGVR       = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	namespaceGVR = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
)

// Config configures the Manager.
type Config struct {
	// Namespace is the platform namespace.
	Namespace string
	// FreshFor: freshUntil = observedAt + FreshFor.
	FreshFor time.Duration
	// Period: every adapter is judged again this often (backups age without
	// any event); changes are judged after Debounce.
	Period   time.Duration
	Debounce time.Duration
	// SyncTimeout: an informer not synced this long after it started makes
	// its adapter Unknown.
	SyncTimeout time.Duration
	// JudgeTimeout is the deadline of one Judge. A Judge past it makes its
	// adapter Unknown (JudgeFailed) and is not started again before it
	// returns: one Judge per adapter at a time.
	JudgeTimeout time.Duration
	// WatchGrace: an adapter one of whose sources the API has not
	// confirmed for this long (its list or watch failing) reads Unknown
	// (WatchFailing) instead of judging its cache; default SyncTimeout.
	WatchGrace time.Duration
	// BackupMaxAge is the backup SLA per scope namespace ("*": every other
	// scope); written as spec.sla.maxAge of the scope's backups object.
	BackupMaxAge map[string]time.Duration
	// Metrics receives the adapters' own metrics (applicable, synced,
	// objects, judgement durations, errors); nil for none.
	Metrics *metrics.Metrics
	// Ready, when set, is called once, when every applicable adapter has
	// published its first answer (the writer's AdaptersReady: from then on
	// it prunes the adapter objects nobody publishes).
	Ready func()
}

// Defaults of Config, the one place they are written (the aggregator's
// flags default to them too).
const (
	DefaultFreshFor     = 10 * time.Minute
	DefaultPeriod       = 10 * time.Second
	DefaultDebounce     = 200 * time.Millisecond
	DefaultSyncTimeout  = 30 * time.Second
	DefaultJudgeTimeout = 5 * time.Second
)

func (c *Config) defaults() {
	if c.Period <= 0 {
		c.Period = DefaultPeriod
	}
	if c.Debounce <= 0 {
		c.Debounce = DefaultDebounce
	}
	if c.SyncTimeout <= 0 {
		c.SyncTimeout = DefaultSyncTimeout
	}
	if c.JudgeTimeout <= 0 {
		c.JudgeTimeout = DefaultJudgeTimeout
	}
	if c.FreshFor <= 0 {
		c.FreshFor = DefaultFreshFor
	}
	if c.WatchGrace <= 0 {
		c.WatchGrace = c.SyncTimeout
	}
}

// Manager watches the adapters' sources and publishes their findings.
type Manager struct {
	cfg      Config
	dyn      dynamic.Interface
	adapters []Adapter
	pub      status.Publisher
	log      *zap.Logger
	clock    clock.WithTicker

	crds, namespaces cache.SharedIndexInformer
	wake             chan struct{}

	// mu guards everything below.
	mu sync.Mutex
	// watches are the running informers, by resource.
	watches map[schema.GroupVersionResource]*watch
	// states are per adapter (same index as adapters).
	states []*adapterState
	// published are the objects published last, by key.
	published map[objectKey]bool
	// transitions remember each condition's last transition.
	transitions map[transitionKey]transition
	ready       bool
}

type watch struct {
	inf     cache.SharedIndexInformer
	stop    chan struct{}
	started time.Time
	// objects counts the cached objects (adds minus deletes seen by the
	// event handler), for cozy_health_adapter_objects.
	objects atomic.Int64
	// confirm is what the API last confirmed of the cache.
	confirm *confirmation
}

type adapterState struct {
	applicable bool
	dirty      bool
	findings   []Finding
	// judging is set while a Judge runs, past its deadline too (one at a
	// time per adapter); the Judge's goroutine clears it.
	judging bool
	// observedAt is when the API last confirmed the facts of findings
	// (now for an adapter that has no trustworthy answer: its Unknown is
	// current).
	observedAt time.Time
	// watchFailing is set while the adapter reads WatchFailing (counted
	// once per occurrence).
	watchFailing bool
	// settled: synced (and judged) or past the sync timeout once.
	settled bool
	// notSynced is set while the adapter reads SourceNotSynced (its error
	// is counted once per occurrence).
	notSynced bool
	// pending counts the watch events on the adapter's sources since its
	// last judgement started: its queue depth.
	pending int
}

// objectKey names one Health object the adapters publish.
type objectKey struct {
	Namespace, Component string
}

type transitionKey struct {
	ns, comp, typ, ref string
}

type transition struct {
	status, reason string
	at             time.Time
}

// NewManager builds a Manager; it watches nothing until Run.
func NewManager(cfg Config, dyn dynamic.Interface, adapters []Adapter, pub status.Publisher, log *zap.Logger, clk clock.WithTicker) *Manager {
	cfg.defaults()
	if clk == nil {
		clk = clock.RealClock{}
	}
	m := &Manager{cfg: cfg, dyn: dyn, adapters: adapters, pub: pub, log: log.With(zap.String("component", "adapters")), clock: clk,
		wake: make(chan struct{}, 1), watches: map[schema.GroupVersionResource]*watch{},
		published: map[objectKey]bool{}, transitions: map[transitionKey]transition{}}
	names := make([]string, 0, len(adapters))
	for _, a := range adapters {
		m.states = append(m.states, &adapterState{})
		names = append(names, a.Name())
	}
	if cfg.Metrics != nil {
		cfg.Metrics.AdaptersKnown(names)
	}
	return m
}

// crdInfo is the projection of a CustomResourceDefinition.
type crdInfo struct {
	established bool
	served      []string
}

func projectCRD(u *unstructured.Unstructured) any {
	info := crdInfo{}
	if c := Find(Conditions(u), "Established"); c != nil && c.Status == "True" {
		info.established = true
	}
	vs, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
	for _, v := range vs {
		m, _ := v.(map[string]any)
		if served, _ := m["served"].(bool); served {
			info.served = append(info.served, str(m["name"]))
		}
	}
	if u.GetDeletionTimestamp() != nil {
		info.established = false
	}
	return info
}

func projectNamespace(u *unstructured.Unstructured) any {
	return IsTenantNamespace(u.GetName(), u.GetLabels())
}

// Seed hands the Manager the conditions of the adapter objects an earlier
// leader wrote, so a condition published as it was keeps its
// lastTransitionTime across failovers.
func (m *Manager) Seed(namespace, component string, conds []SeedCondition) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range conds {
		m.transitions[transitionKey{namespace, component, c.Type, c.Ref}] = transition{status: c.Status, reason: c.Reason, at: c.At}
	}
}

// SeedCondition is a written condition (Ref as status.Condition.ResourceKey).
type SeedCondition struct {
	Type, Ref, Status, Reason string
	At                        time.Time
}

// Run watches and publishes until ctx is cancelled.
func (m *Manager) Run(ctx context.Context) error {
	m.crds = m.informer(crdGVR, projectCRD, &confirmation{})
	m.namespaces = m.informer(namespaceGVR, projectNamespace, &confirmation{})
	// A new or removed API, or a namespace becoming a tenant's, may change
	// every adapter's answer.
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { m.markAll() },
		UpdateFunc: func(any, any) { m.markAll() },
		DeleteFunc: func(any) { m.markAll() },
	}
	if _, err := m.crds.AddEventHandler(handler); err != nil {
		return fmt.Errorf("watch CustomResourceDefinitions: %w", err)
	}
	if _, err := m.namespaces.AddEventHandler(handler); err != nil {
		return fmt.Errorf("watch Namespaces: %w", err)
	}
	go m.crds.RunWithContext(ctx)
	go m.namespaces.RunWithContext(ctx)
	defer m.stopAll()
	if !cache.WaitForCacheSync(ctx.Done(), m.crds.HasSynced, m.namespaces.HasSynced) {
		return nil
	}
	m.log.Info("watching CustomResourceDefinitions and Namespaces", zap.Int("adapters", len(m.adapters)))
	tick := m.clock.NewTicker(m.cfg.Debounce)
	defer tick.Stop()
	var lastFull time.Time
	for {
		m.reconcileWatches()
		now := m.clock.Now()
		full := now.Sub(lastFull) >= m.cfg.Period
		if full {
			lastFull = now
		}
		m.evaluate(ctx, full)
		// At most one evaluation per Debounce: changes arriving meanwhile
		// are judged together.
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C():
		}
		for !m.anyDirty() && m.clock.Since(lastFull) < m.cfg.Period {
			select {
			case <-ctx.Done():
				return nil
			case <-m.wake:
			case <-tick.C():
			}
		}
	}
}

func (m *Manager) anyDirty() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, st := range m.states {
		if st.dirty {
			return true
		}
	}
	return false
}

func (m *Manager) markAll() {
	m.mu.Lock()
	for _, st := range m.states {
		st.dirty = true
	}
	m.mu.Unlock()
	m.poke()
}

// poke marks that something changed (coalesced).
func (m *Manager) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// informer builds a dynamic informer on gvr whose list and watch report to
// confirm.
func (m *Manager) informer(gvr schema.GroupVersionResource, project func(*unstructured.Unstructured) any, confirm *confirmation) cache.SharedIndexInformer {
	inf := cache.NewSharedIndexInformerWithOptions(confirmingListWatch(m.dyn, gvr, confirm, m.clock.Now), &unstructured.Unstructured{},
		cache.SharedIndexInformerOptions{ObjectDescription: gvr.String()})
	_ = inf.SetTransform(func(obj any) (any, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return obj, nil
		}
		return CachedObject(u, project), nil
	})
	return inf
}

// served says whether gvr is served by an established CRD.
func (m *Manager) served(gvr schema.GroupVersionResource) bool {
	it, ok, _ := m.crds.GetStore().GetByKey(gvr.Resource + "." + gvr.Group)
	if !ok {
		return false
	}
	info, _ := it.(*Object).Data.(crdInfo)
	if !info.established {
		return false
	}
	for _, v := range info.served {
		if v == gvr.Version {
			return true
		}
	}
	return false
}

// reconcileWatches starts the informers of adapters that became applicable
// and stops those whose API went away.
func (m *Manager) reconcileWatches() {
	m.mu.Lock()
	defer m.mu.Unlock()
	want := map[schema.GroupVersionResource]func(*unstructured.Unstructured) any{}
	for i, a := range m.adapters {
		st := m.states[i]
		applicable := true
		for _, s := range a.Sources() {
			if !s.Optional && !m.served(s.GVR) {
				applicable = false
			}
		}
		if applicable != st.applicable {
			m.log.Info("adapter applicability changed", zap.String("adapter", a.Name()), zap.Bool("applicable", applicable))
			st.applicable, st.dirty, st.settled = applicable, true, false
			if !applicable {
				st.findings = nil
			}
		}
		if !applicable {
			continue
		}
		for _, s := range a.Sources() {
			if m.served(s.GVR) {
				want[s.GVR] = s.Project
			}
		}
	}
	for gvr, w := range m.watches {
		if _, ok := want[gvr]; !ok {
			close(w.stop)
			delete(m.watches, gvr)
			m.markUsers(gvr)
			m.log.Info("stopped watching", zap.Stringer("resource", gvr))
		}
	}
	for gvr, project := range want {
		if _, ok := m.watches[gvr]; ok {
			continue
		}
		confirm := &confirmation{}
		inf := m.informer(gvr, project, confirm)
		w := &watch{inf: inf, stop: make(chan struct{}), started: m.clock.Now(), confirm: confirm}
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { w.objects.Add(1); m.markDirty(gvr) },
			UpdateFunc: func(any, any) { m.markDirty(gvr) },
			DeleteFunc: func(any) { w.objects.Add(-1); m.markDirty(gvr) },
		})
		_ = inf.SetWatchErrorHandlerWithContext(m.watchErrorHandler(gvr, confirm))
		m.watches[gvr] = w
		go inf.Run(w.stop)
		m.markUsers(gvr)
		m.log.Info("watching", zap.Stringer("resource", gvr))
	}
}

// markUsers marks every adapter reading gvr dirty. m.mu held.
func (m *Manager) markUsers(gvr schema.GroupVersionResource) {
	for i, a := range m.adapters {
		for _, s := range a.Sources() {
			if s.GVR == gvr {
				m.states[i].dirty = true
			}
		}
	}
}

// watchErrorHandler logs and counts a failed list or watch of gvr for
// every adapter reading it, as client-go's default handler would log it,
// and records the failure (the ListerWatcher records it too, and also the
// refused watches the reflector retries without calling this handler).
// A watch that expired or closed is routine, and an API that went away
// (NotFound) is absence: the CRD watch stops the informer.
func (m *Manager) watchErrorHandler(gvr schema.GroupVersionResource, confirm *confirmation) cache.WatchErrorHandlerWithContext {
	return func(_ context.Context, _ *cache.Reflector, err error) {
		if err == io.EOF || err == io.ErrUnexpectedEOF || apierrors.IsResourceExpired(err) || apierrors.IsGone(err) || apierrors.IsNotFound(err) {
			return
		}
		confirm.failed(err)
		m.log.Warn("list and watch failed", zap.Stringer("resource", gvr), zap.Error(err))
		if m.cfg.Metrics == nil {
			return
		}
		for _, a := range m.adapters {
			for _, s := range a.Sources() {
				if s.GVR == gvr {
					m.cfg.Metrics.AdapterError(a.Name(), metrics.AdapterErrorWatch)
					break
				}
			}
		}
	}
}

// markDirty marks every adapter reading gvr dirty on a watch event, and
// counts the event for each.
func (m *Manager) markDirty(gvr schema.GroupVersionResource) {
	m.mu.Lock()
	for i, a := range m.adapters {
		for _, s := range a.Sources() {
			if s.GVR == gvr {
				m.states[i].dirty = true
				m.states[i].pending++
				if m.cfg.Metrics != nil {
					m.cfg.Metrics.AdapterEvent(a.Name())
				}
			}
		}
	}
	m.mu.Unlock()
	m.poke()
}

func (m *Manager) stopAll() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for gvr, w := range m.watches {
		close(w.stop)
		delete(m.watches, gvr)
	}
}

// evaluate judges the dirty adapters (all when full) and publishes.
func (m *Manager) evaluate(ctx context.Context, full bool) {
	now := m.clock.Now()
	type job struct {
		i      int
		a      Adapter
		stores map[schema.GroupVersionResource]cache.Store
		// observedAt is when the API last confirmed the stores.
		observedAt time.Time
	}
	var jobs []job
	m.mu.Lock()
	m.recordStates(now)
	for i, a := range m.adapters {
		st := m.states[i]
		if !st.applicable || (!st.dirty && !full) {
			continue
		}
		if st.judging {
			// The last Judge is still running past its deadline: it is not
			// started again (its goroutine marks the adapter dirty when it
			// returns). Each periodic judgement it holds up is counted.
			if full && m.cfg.Metrics != nil {
				m.cfg.Metrics.AdapterJudgeSkipped(a.Name())
			}
			continue
		}
		st.dirty = false
		stores := map[schema.GroupVersionResource]cache.Store{}
		var unsynced []Source
		var since time.Time
		for _, s := range a.Sources() {
			w := m.watches[s.GVR]
			if w == nil {
				continue // an optional source that is not served
			}
			if !w.inf.HasSynced() {
				unsynced = append(unsynced, s)
				if since.IsZero() || w.started.Before(since) {
					since = w.started
				}
				continue
			}
			stores[s.GVR] = w.inf.GetStore()
		}
		if len(unsynced) > 0 {
			if now.Sub(since) < m.cfg.SyncTimeout {
				st.dirty = true // look again at the next tick
				continue
			}
			st.findings = m.unknownFindings(i, now, ReasonSourceNotSynced, unsyncedMessage(unsynced, since), unsynced[0])
			st.observedAt = now
			st.settled = true
			if !st.notSynced && m.cfg.Metrics != nil {
				m.cfg.Metrics.AdapterError(a.Name(), metrics.AdapterErrorNotSynced)
			}
			st.notSynced = true
			continue
		}
		st.notSynced = false
		// The facts are as old as the stalest source's last confirmation;
		// past the grace the cache is not judged at all.
		observedAt, stale, err := m.confirmedAt(a, now)
		if now.Sub(observedAt) > m.cfg.WatchGrace {
			st.findings = m.unknownFindings(i, now, ReasonWatchFailing, watchFailingMessage(stale, observedAt, err), stale)
			st.observedAt = now
			st.settled = true
			if !st.watchFailing {
				m.log.Warn("adapter's source not confirmed by the API past the grace: reading Unknown", zap.String("adapter", a.Name()),
					zap.String("resource", stale.CRDName()), zap.Time("confirmedAt", observedAt), zap.Error(err))
				if m.cfg.Metrics != nil {
					m.cfg.Metrics.AdapterError(a.Name(), metrics.AdapterErrorWatchFailing)
				}
			}
			st.watchFailing = true
			continue
		}
		st.watchFailing = false
		st.judging = true
		st.pending = 0
		jobs = append(jobs, job{i, a, stores, observedAt})
	}
	m.mu.Unlock()

	in := func(stores map[schema.GroupVersionResource]cache.Store) *Input {
		return NewInput(now, m.cfg.Namespace, stores, m.isTenant, m.maxAge)
	}
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			findings, reason, err := m.judge(ctx, j.i, in(j.stores))
			m.mu.Lock()
			defer m.mu.Unlock()
			st := m.states[j.i]
			if !st.applicable {
				return // went away while judging
			}
			st.settled = true
			if err != nil {
				m.log.Warn("adapter failed", zap.String("adapter", j.a.Name()), zap.Error(err))
				if reason != "" && m.cfg.Metrics != nil {
					m.cfg.Metrics.AdapterError(j.a.Name(), reason)
				}
				st.findings = m.unknownFindings(j.i, now, ReasonJudgeFailed, status.Truncate(err.Error()), j.a.Sources()[0])
				st.observedAt = now
				return
			}
			st.findings, st.observedAt = findings, j.observedAt
		}()
	}
	wg.Wait()
	m.publish(now)
}

// judge runs adapter i's Judge under the deadline, recovering a panic. A
// Judge past its deadline is abandoned (it holds no locks and writes
// nothing) but not forgotten: the adapter stays judging until it returns,
// so no second Judge of it starts meanwhile, and it is judged again then.
// reason is the metrics' error reason of a failed judgement ("" when the
// context ended). The caller has set the adapter's judging.
func (m *Manager) judge(ctx context.Context, i int, in *Input) (findings []Finding, reason string, err error) {
	a := m.adapters[i]
	type result struct {
		f   []Finding
		err error
	}
	ch := make(chan result, 1)
	var (
		mu                 sync.Mutex
		finished, timedOut bool
	)
	start := time.Now()
	go func() {
		var r result
		defer func() {
			if p := recover(); p != nil {
				m.log.Error("adapter panicked", zap.String("adapter", a.Name()), zap.Any("panic", p), zap.ByteString("stack", debug.Stack()))
				r = result{err: fmt.Errorf("judge panicked: %v", p)}
			}
			took := time.Since(start)
			mu.Lock()
			finished = true
			late := timedOut
			mu.Unlock()
			m.judgeDone(i, took, late)
			ch <- r
		}()
		r = result{f: a.Judge(in)}
	}()
	t := m.clock.NewTimer(m.cfg.JudgeTimeout)
	defer t.Stop()
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, metrics.AdapterErrorPanic, r.err
		}
		return r.f, "", nil
	case <-t.C():
	case <-ctx.Done():
	}
	mu.Lock()
	if finished {
		mu.Unlock()
		r := <-ch
		if r.err != nil {
			return nil, metrics.AdapterErrorPanic, r.err
		}
		return r.f, "", nil
	}
	timedOut = true
	mu.Unlock()
	if ctx.Err() != nil {
		return nil, "", ctx.Err()
	}
	return nil, metrics.AdapterErrorTimeout, fmt.Errorf("judge did not finish within %s", m.cfg.JudgeTimeout)
}

// judgeDone records a finished Judge of adapter i: its duration, and that
// the adapter may be judged again (at once when it finished late: its
// answer was dropped).
func (m *Manager) judgeDone(i int, took time.Duration, late bool) {
	a := m.adapters[i]
	if m.cfg.Metrics != nil {
		m.cfg.Metrics.AdapterJudged(a.Name(), took)
	}
	m.mu.Lock()
	st := m.states[i]
	st.judging = false
	if late {
		st.dirty = true
	}
	m.mu.Unlock()
	if late {
		m.log.Info("a judgement past its deadline returned", zap.String("adapter", a.Name()), zap.Duration("took", took))
		m.poke()
	}
}

// confirmedAt is when the API last confirmed the caches adapter a judges:
// the oldest confirmation among its watched sources (now for sources with
// an open watch), that source, and its failure since, if any. m.mu held.
func (m *Manager) confirmedAt(a Adapter, now time.Time) (time.Time, Source, error) {
	at, src := now, a.Sources()[0]
	var failure error
	for _, s := range a.Sources() {
		w := m.watches[s.GVR]
		if w == nil {
			continue
		}
		t, err := w.confirm.observed(now)
		if t.Before(at) {
			at, src, failure = t, s, err
		}
	}
	return at, src, failure
}

// watchFailingMessage names the source, when the API last confirmed it
// (an instant, so the message does not move while it lasts) and why.
func watchFailingMessage(src Source, since time.Time, err error) string {
	msg := fmt.Sprintf("cannot list and watch %s: its objects are as last confirmed at %s", src.CRDName(), since.UTC().Format(time.RFC3339))
	if err != nil {
		// A request that failed on the way names its long URL first; the
		// resource is named already.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		msg += ": " + err.Error()
	}
	return status.Truncate(msg)
}

// recordStates exports every adapter's applicability, sync, object count,
// queue depth and when the API last confirmed its caches. m.mu held.
func (m *Manager) recordStates(now time.Time) {
	if m.cfg.Metrics == nil {
		return
	}
	for i, a := range m.adapters {
		st := m.states[i]
		synced, objects := st.applicable, 0
		if st.applicable {
			for _, s := range a.Sources() {
				w := m.watches[s.GVR]
				if w == nil {
					continue // an optional source that is not served
				}
				synced = synced && w.inf.HasSynced()
				objects += int(w.objects.Load())
			}
		}
		m.cfg.Metrics.AdapterState(a.Name(), st.applicable, synced, objects)
		m.cfg.Metrics.AdapterPending(a.Name(), st.pending)
		if st.applicable && synced {
			at, _, _ := m.confirmedAt(a, now)
			m.cfg.Metrics.AdapterConfirmed(a.Name(), at)
		}
	}
}

// unsyncedMessage names when the watch started rather than how long ago:
// a message that moves at every judgement would be a new status to write.
func unsyncedMessage(srcs []Source, since time.Time) string {
	names := make([]string, len(srcs))
	for i, s := range srcs {
		names[i] = s.CRDName()
	}
	return status.Truncate(fmt.Sprintf("cannot list and watch %v since %s", names, since.UTC().Format(time.RFC3339)))
}

// unknownFindings are the findings of an adapter that has no trustworthy
// answer: Source Unknown in the platform namespace and in every scope it
// published before. m.mu held.
func (m *Manager) unknownFindings(i int, now time.Time, reason, msg string, src Source) []Finding {
	a := m.adapters[i]
	c := status.Condition{Type: TypeSource, Severity: report.StatusUnknown, Reason: reason, Message: msg,
		Resource: &report.ResourceRef{Kind: crdKind, Name: src.CRDName()}}
	out := []Finding{{Namespace: m.cfg.Namespace, Component: a.Component(), Condition: c}}
	seen := map[objectKey]bool{{Namespace: m.cfg.Namespace, Component: a.Component()}: true}
	for _, f := range m.states[i].findings {
		k := objectKey{Namespace: f.Namespace, Component: f.Component}
		if !seen[k] {
			seen[k] = true
			out = append(out, Finding{Namespace: f.Namespace, Component: f.Component, Condition: c})
		}
	}
	return out
}

func (m *Manager) isTenant(ns string) bool {
	it, ok, _ := m.namespaces.GetStore().GetByKey(ns)
	if !ok {
		return false
	}
	t, _ := it.(*Object).Data.(bool)
	return t
}

func (m *Manager) maxAge(scope string) time.Duration {
	if d, ok := m.cfg.BackupMaxAge[scope]; ok {
		return d
	}
	return m.cfg.BackupMaxAge["*"]
}

// publish merges every adapter's findings into Health objects and hands
// them to the publisher; objects without findings are removed.
func (m *Manager) publish(now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	groups := map[objectKey][]status.Condition{}
	// observed is, per object, the oldest observedAt of the adapters
	// contributing to it: an object is as fresh as its stalest fact.
	observed := map[objectKey]time.Time{}
	for _, st := range m.states {
		if !st.applicable {
			continue
		}
		for _, f := range st.findings {
			k := objectKey{Namespace: f.Namespace, Component: f.Component}
			groups[k] = append(groups[k], f.Condition)
			if at, ok := observed[k]; !ok || st.observedAt.Before(at) {
				observed[k] = st.observedAt
			}
		}
	}
	next := map[objectKey]bool{}
	live := map[transitionKey]bool{}
	for k, conds := range groups {
		cs := m.status(k, conds, now, observed[k], live)
		if k.Component == ComponentBackups {
			cs.MaxAge = m.maxAge(k.Namespace)
		}
		m.pub.Publish(k.Namespace, cs)
		next[k] = true
	}
	for k := range m.published {
		if !next[k] {
			m.pub.Remove(k.Namespace, k.Component)
		}
	}
	m.published = next
	for tk := range m.transitions {
		if !live[tk] && m.ready {
			delete(m.transitions, tk)
		}
	}
	if !m.ready {
		settled := true
		for _, st := range m.states {
			if st.applicable && !st.settled {
				settled = false
			}
		}
		if settled {
			m.ready = true
			if m.cfg.Ready != nil {
				m.cfg.Ready()
			}
			m.log.Info("adapters published their first answer", zap.Int("objects", len(next)))
		}
	}
}

// status builds one object's status: worst condition wins, conditions
// sorted (worst first, then by type and resource), at most
// maxConditionsPerObject listed; observedAt is when the API last confirmed
// its facts, freshUntil FreshFor after. m.mu held.
func (m *Manager) status(k objectKey, conds []status.Condition, now, observedAt time.Time, live map[transitionKey]bool) *status.Component {
	if observedAt.IsZero() || observedAt.After(now) {
		observedAt = now
	}
	cs := &status.Component{Component: k.Component, Source: status.FromAdapters, Overall: report.StatusHealthy, ObservedAt: observedAt, FreshUntil: observedAt.Add(m.cfg.FreshFor)}
	for i := range conds {
		c := &conds[i]
		cs.Overall = report.Worse(cs.Overall, c.Severity)
		tk := transitionKey{k.Namespace, k.Component, c.Type, c.ResourceKey()}
		live[tk] = true
		st := string(c.ConditionStatus())
		if t, ok := m.transitions[tk]; ok && t.status == st && t.reason == c.Reason {
			c.LastTransition = t.at
		} else {
			c.LastTransition = now.UTC().Truncate(time.Second)
			m.transitions[tk] = transition{status: st, reason: c.Reason, at: c.LastTransition}
		}
		if c.Backup != nil && !c.Backup.LastSuccessfulAt.IsZero() {
			// A copy: the facts are the adapter's finding, shared with the
			// status published before (status.Publisher keeps what it gets).
			b := *c.Backup
			b.ObservedAge = max(now.Sub(b.LastSuccessfulAt), 0)
			c.Backup = &b
		}
	}
	sort.SliceStable(conds, func(i, j int) bool {
		if ri, rj := conds[i].Severity.Rank(), conds[j].Severity.Rank(); ri != rj {
			return ri > rj
		}
		if conds[i].Type != conds[j].Type {
			return conds[i].Type < conds[j].Type
		}
		return conds[i].ResourceKey() < conds[j].ResourceKey()
	})
	if len(conds) > maxConditionsPerObject {
		conds = conds[:maxConditionsPerObject]
	}
	for _, c := range conds {
		if c.ConditionStatus() == "False" {
			cs.Issues++
		}
	}
	cs.Conditions = conds
	return cs
}

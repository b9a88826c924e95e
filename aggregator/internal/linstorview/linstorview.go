// Package linstorview is the aggregator's view of the LINSTOR controller,
// which feeds the rollup and the drain check. It is no cluster adapter
// (not in adapters.All(); it reads LINSTOR's REST API): the app wires it
// by hand, and it reports its metrics under adapter="linstor" as the
// adapters do. It reads the controller's view (GET /v1/nodes, GET
// /v1/view/resources and GET /v1/view/storage-pools, through
// pkg/linstorapi) once per interval, centrally, instead of every agent
// asking the controller for its own node. The controller's view is
// cluster-level: each satellite's connection, every replica of every
// resource and its disk state as the satellites report it.
//
// The client certificate is read where Cozystack keeps it: Secret
// linstor-client-tls in cozy-linstor (cert-manager issues and renews it
// for the Piraeus operator), through an informer on that one Secret (a
// field selector on its name, which a resourceNames-scoped Role allows),
// so a renewal is used at the next read without a restart, and no copy of
// the Secret is made.
//
// Every replica reads (each holds the full state: its drain checks need the
// replicas' placement as much as the leader's writer does); see Rate for
// what that costs the controller.
//
// What it publishes:
//   - into the rollup (Facts): the linstor component's per-node
//     LinstorSatellite and DrbdResource conditions, in the shape agents
//     used to report them, plus a LinstorController condition saying
//     whether the view is current. A view older than FreshFor (reads
//     failing, the Secret missing) is Unknown, never the last answer.
//   - into the drain pre-check (Placement): every replica, every
//     satellite's storage pools with their kind and free capacity (for a
//     decommission: where a replica can go), and whether the view is
//     fresh. A failed pool read does not fail the view: the replicas are
//     judged, and the pools are unknown until a read succeeds again.
package linstorview

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/cozystack/cozy-health/aggregator/internal/metrics"
	"github.com/cozystack/cozy-health/aggregator/internal/rollup"
	"github.com/cozystack/cozy-health/aggregator/internal/status"
	"github.com/cozystack/cozy-health/pkg/linstorapi"
	"github.com/cozystack/cozy-health/pkg/report"
)

// Condition type and reasons of the component-level condition this view
// adds to the linstor component.
const (
	TypeController = "LinstorController"
	// ReasonViewRead: the controller's view was read at observedAt.
	ReasonViewRead = "ViewRead"
	// ReasonNeverRead: no read has succeeded since this replica started.
	ReasonNeverRead = "ViewNeverRead"
	// ReasonViewStale: reads have failed past FreshFor.
	ReasonViewStale = "ViewStale"
)

// Config configures a Reader.
type Config struct {
	// URL is the controller's REST URL (Cozystack:
	// https://linstor-controller.cozy-linstor.svc:3371).
	URL string
	// SecretNamespace and SecretName name the client certificate Secret
	// (ca.crt, tls.crt, tls.key); an empty SecretName speaks without one.
	SecretNamespace, SecretName string
	// Interval: the view is read this often; default 10s.
	Interval time.Duration
	// Timeout bounds one read (both requests); default Interval.
	Timeout time.Duration
	// FreshFor: a view older than this is Unknown; default 3 x Interval.
	FreshFor time.Duration
	// MaxBody caps one answer (linstorapi.DefaultMaxBody when 0).
	MaxBody int64
	// Metrics receives the adapter metrics under adapter="linstor"
	// (synced: the last read succeeded; objects: replicas; judge
	// duration: one read; errors{reason="read"}: every failed read); nil
	// for none.
	Metrics *metrics.Metrics
}

// Name is the view's name in logs and metrics (the adapter label).
const Name = "linstor"

func (c *Config) defaults() {
	if c.Interval <= 0 {
		c.Interval = 10 * time.Second
	}
	if c.Timeout <= 0 {
		c.Timeout = c.Interval
	}
	if c.FreshFor <= 0 {
		c.FreshFor = 3 * c.Interval
	}
}

// View is one replica's latest knowledge of the controller's view.
// Immutable once published.
type View struct {
	// Gen numbers the views published (a new one on every change of what
	// is judged: a read, or a failure after a success).
	Gen uint64
	// ObservedAt is when the controller last answered both requests (zero:
	// never).
	ObservedAt time.Time
	// Err is the failure of the reads since ObservedAt (nil: the last read
	// succeeded); FailingSince is when they started failing.
	Err          error
	FailingSince time.Time
	// Replicas and Observations are the view as of ObservedAt.
	Replicas     []linstorapi.Replica
	Observations map[string][]report.Observation
	// Satellites is every node's satellite connection status as of
	// ObservedAt.
	Satellites map[string]string
	// Pools are the storage pools read with Replicas; PoolsErr, when
	// set, is why they could not be (Pools is then nil).
	Pools    []linstorapi.PoolRoom
	PoolsErr error
}

// Reader reads the controller's view on an interval.
type Reader struct {
	cfg    Config
	kube   kubernetes.Interface
	client *linstorapi.Client
	log    *zap.Logger
	clock  clock.WithTicker

	secrets cache.SharedIndexInformer
	latest  atomic.Pointer[View]
	// mu serializes reads (Run's loop and ReadNow in tests) and guards
	// connectingSince.
	mu  sync.Mutex
	gen uint64
	// connectingSince is when each satellite was first read CONNECTED or
	// AUTHENTICATED in its current run of such reads.
	connectingSince map[string]time.Time
}

// connecting returns how long each connecting satellite of nodes has been
// connecting, as this reader has seen it; r.mu held.
func (r *Reader) connecting(nodes []linstorapi.Node, now time.Time) map[string]time.Duration {
	since := make(map[string]time.Time, len(r.connectingSince))
	out := map[string]time.Duration{}
	for _, n := range nodes {
		if linstorapi.ClassOf(n.ConnectionStatus) != linstorapi.SatelliteConnecting {
			continue
		}
		t, ok := r.connectingSince[n.Name]
		if !ok {
			t = now
		}
		since[n.Name] = t
		out[n.Name] = now.Sub(t)
	}
	r.connectingSince = since
	return out
}

// New builds a Reader; it reads nothing until Run.
func New(cfg Config, kube kubernetes.Interface, log *zap.Logger, clk clock.WithTicker) (*Reader, error) {
	cfg.defaults()
	if clk == nil {
		clk = clock.RealClock{}
	}
	r := &Reader{cfg: cfg, kube: kube, log: log.With(zap.String("component", "linstor")), clock: clk}
	lc := linstorapi.Config{URL: cfg.URL, MaxBody: cfg.MaxBody}
	if cfg.SecretName != "" {
		if kube == nil {
			return nil, errors.New("linstor: a client certificate Secret needs a Kubernetes client")
		}
		f := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(cfg.SecretNamespace),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.FieldSelector = fields.OneTermEqualSelector("metadata.name", cfg.SecretName).String()
			}))
		r.secrets = f.Core().V1().Secrets().Informer()
		lc.Credentials = r.credentials
	}
	c, err := linstorapi.New(lc)
	if err != nil {
		return nil, err
	}
	r.client = c
	r.latest.Store(&View{})
	if cfg.Metrics != nil {
		cfg.Metrics.AdaptersKnown([]string{Name})
		cfg.Metrics.AdapterState(Name, true, false, 0)
	}
	return r, nil
}

// credentials reads the Secret from the informer's cache.
func (r *Reader) credentials() (linstorapi.TLSMaterial, error) {
	where := r.cfg.SecretNamespace + "/" + r.cfg.SecretName
	if !r.secrets.HasSynced() {
		return linstorapi.TLSMaterial{}, fmt.Errorf("Secret %s not read yet (list/watch failing: is the Role in %s bound?)", where, r.cfg.SecretNamespace)
	}
	obj, ok, err := r.secrets.GetStore().GetByKey(where)
	if err != nil || !ok {
		return linstorapi.TLSMaterial{}, fmt.Errorf("Secret %s not found (the Piraeus operator's cert-manager Certificate writes it)", where)
	}
	s, _ := obj.(*corev1.Secret)
	if s == nil {
		return linstorapi.TLSMaterial{}, fmt.Errorf("Secret %s: not a Secret", where)
	}
	m := linstorapi.TLSMaterial{CA: s.Data["ca.crt"], Cert: s.Data["tls.crt"], Key: s.Data["tls.key"]}
	if len(m.Cert) == 0 || len(m.Key) == 0 {
		return linstorapi.TLSMaterial{}, fmt.Errorf("Secret %s has no tls.crt and tls.key", where)
	}
	return m, nil
}

// Run watches the Secret and reads the view every Interval until ctx ends.
func (r *Reader) Run(ctx context.Context) error {
	if r.secrets != nil {
		go r.secrets.RunWithContext(ctx)
		// The first read waits for the Secret's list (at most one
		// interval): a read before it would fail for nothing. One that
		// cannot list (the Role not bound) fails naming the Secret.
		wait, cancel := context.WithTimeout(ctx, r.cfg.Interval)
		cache.WaitForCacheSync(wait.Done(), r.secrets.HasSynced)
		cancel()
	}
	r.log.Info("reading the LINSTOR controller's view", zap.String("url", r.client.URL()), zap.Duration("interval", r.cfg.Interval),
		zap.String("secret", r.cfg.SecretNamespace+"/"+r.cfg.SecretName))
	t := r.clock.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		r.ReadNow(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
	}
}

// ReadNow reads the view once and publishes the result.
func (r *Reader) ReadNow(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	prev := r.latest.Load()
	start := time.Now()
	nodes, err := r.client.Nodes(ctx)
	var view []linstorapi.Resource
	if err == nil {
		view, err = r.client.ResourceView(ctx)
	}
	var pools []linstorapi.StoragePool
	var poolsErr error
	if err == nil {
		pools, poolsErr = r.client.StoragePools(ctx)
	}
	now := r.clock.Now()
	next := *prev
	if m := r.cfg.Metrics; m != nil {
		m.AdapterJudged(Name, time.Since(start))
		if err != nil {
			m.AdapterError(Name, metrics.AdapterErrorRead)
			m.AdapterState(Name, true, false, len(prev.Replicas))
		}
	}
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = fmt.Errorf("%s: %w", ue.Op, ue.Err) // the URL is in the logs once, not in every message
		}
		if prev.Err == nil {
			next.FailingSince = now
			r.log.Warn("LINSTOR controller view not read", zap.Error(err), zap.Time("lastRead", prev.ObservedAt))
		}
		if prev.Err != nil && prev.Err.Error() == err.Error() {
			return // nothing new to judge
		}
		next.Err = err
	} else {
		if prev.Err != nil {
			r.log.Info("LINSTOR controller view read again", zap.Time("failingSince", prev.FailingSince))
		}
		reps := linstorapi.Replicas(view, nodes)
		if m := r.cfg.Metrics; m != nil {
			m.AdapterState(Name, true, true, len(reps))
		}
		next = View{ObservedAt: now, Replicas: reps, Observations: linstorapi.Observations(nodes, reps, r.connecting(nodes, now)),
			Satellites: linstorapi.Satellites(nodes)}
		if poolsErr != nil {
			var ue *url.Error
			if errors.As(poolsErr, &ue) {
				poolsErr = fmt.Errorf("%s: %w", ue.Op, ue.Err)
			}
			if prev.PoolsErr == nil {
				r.log.Warn("LINSTOR storage pools not read", zap.Error(poolsErr))
			}
			next.PoolsErr = poolsErr
			if m := r.cfg.Metrics; m != nil {
				m.AdapterError(Name, metrics.AdapterErrorRead)
			}
		} else {
			next.Pools = linstorapi.Rooms(pools)
		}
	}
	r.gen++
	next.Gen = r.gen
	r.latest.Store(&next)
}

// View is the latest view.
func (r *Reader) View() *View { return r.latest.Load() }

// fresh tells whether v is current at now, and if not why.
func (r *Reader) fresh(v *View, now time.Time) (bool, string, string) {
	switch {
	case v.ObservedAt.IsZero():
		msg := "the LINSTOR controller's view has not been read yet"
		if v.Err != nil {
			msg = fmt.Sprintf("the LINSTOR controller's view has not been read since %s: %v", v.FailingSince.UTC().Format(time.RFC3339), v.Err)
		}
		return false, ReasonNeverRead, status.Truncate(msg)
	case now.Sub(v.ObservedAt) > r.cfg.FreshFor:
		msg := fmt.Sprintf("the LINSTOR controller's view is as last read at %s", v.ObservedAt.UTC().Format(time.RFC3339))
		if v.Err != nil {
			msg += fmt.Sprintf(": %v", v.Err)
		}
		return false, ReasonViewStale, status.Truncate(msg)
	}
	return true, "", ""
}

// Facts is the view as the rollup merges it into the linstor component.
func (r *Reader) Facts(now time.Time) *rollup.ClusterFacts {
	v := r.View()
	cf := &rollup.ClusterFacts{Component: report.ComponentLinstor, Type: TypeController, Gen: v.Gen,
		ObservedAt: v.ObservedAt, FreshUntil: v.ObservedAt.Add(r.cfg.FreshFor)}
	fresh, reason, msg := r.fresh(v, now)
	if !fresh {
		cf.Reason, cf.Message = reason, msg
		return cf
	}
	cf.Nodes = v.Observations
	cf.Message = fmt.Sprintf("read from %s", r.client.URL())
	return cf
}

// Replicas is the view as the drain pre-check reads it: every replica, and
// why the view cannot be trusted at now ("" when it is fresh). A drain
// moves data, so it reads the controller's view only while the latest read
// succeeded: one failed read makes it unknown at once, where the rollup
// keeps the last view for FreshFor.
func (r *Reader) Replicas(now time.Time) ([]linstorapi.Replica, string) {
	return r.replicasOf(r.View(), now)
}

func (r *Reader) replicasOf(v *View, now time.Time) ([]linstorapi.Replica, string) {
	if fresh, _, msg := r.fresh(v, now); !fresh {
		return nil, msg
	}
	if v.Err != nil {
		return nil, status.Truncate(fmt.Sprintf("the latest read of the LINSTOR controller's view failed (failing since %s; last read %s): %v",
			v.FailingSince.UTC().Format(time.RFC3339), v.ObservedAt.UTC().Format(time.RFC3339), v.Err))
	}
	return v.Replicas, ""
}

// Placement is the view as the drain's decommission rule reads it: the
// replicas (as Replicas returns them) and the storage pools read with
// them, or why the pools are not known.
func (r *Reader) Placement(now time.Time) (linstorapi.Placement, string) {
	v := r.View()
	reps, why := r.replicasOf(v, now)
	if why != "" {
		return linstorapi.Placement{}, why
	}
	p := linstorapi.Placement{Replicas: reps, Satellites: v.Satellites, Pools: v.Pools}
	if v.PoolsErr != nil {
		p.PoolsWhy = status.Truncate(fmt.Sprintf("the LINSTOR storage pools were not read (as of %s): %v", v.ObservedAt.UTC().Format(time.RFC3339), v.PoolsErr))
	}
	return p, ""
}

// Rate is the controller requests per second the aggregator makes: three
// per read (nodes, resources, storage pools), one read per Interval on each
// of replicas, whatever the node count (the agents used to make two or
// three per node per report interval). The storage pools request makes the
// controller ask each satellite with a thin pool for its free space.
func Rate(replicas int, interval time.Duration) float64 {
	return float64(3*replicas) / interval.Seconds()
}

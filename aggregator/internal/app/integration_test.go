package app

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/cozystack/cozy-health/aggregator/internal/config"
	"github.com/cozystack/cozy-health/aggregator/internal/writer"
	"github.com/cozystack/cozy-health/deploy"
	healthv1alpha1 "github.com/cozystack/cozy-health/pkg/apis/health/v1alpha1"
	"github.com/cozystack/cozy-health/pkg/client/clientset/versioned"
	"github.com/cozystack/cozy-health/pkg/logging"
	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/pkg/report/reporttest"
	"github.com/cozystack/cozy-health/pkg/tlsutil"
	"github.com/cozystack/cozy-health/test/harness"
)

const testNS = "cozy-system"

// startPlane starts a real apiserver with the CRDs and the namespace.
func startPlane(t *testing.T) *harness.ControlPlane {
	t.Helper()
	cp := harness.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, cp.InstallCRDs(ctx))
	require.NoError(t, cp.EnsureNamespace(ctx, testNS))
	return cp
}

// testConfig is a fast configuration: 1 s intervals, 3 s leases.
func testConfig(t *testing.T, identity string) config.Config {
	t.Helper()
	files, err := tlsutil.WriteServing(t.TempDir(), "127.0.0.1", "localhost")
	require.NoError(t, err)
	cfg := config.Default()
	cfg.Identity = identity
	cfg.Namespace = testNS
	cfg.LeaseNamespace = testNS
	cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod = 3*time.Second, 2*time.Second, 500*time.Millisecond
	cfg.ReportInterval = time.Second
	cfg.FreshForMultiple = 6
	cfg.RefreshPeriod = 2 * time.Second
	cfg.RollupPeriod = 250 * time.Millisecond
	cfg.WarmUp, cfg.WarmUpMax = 0, 0 // TestWarmUpWaitsForEveryExpectedNode sets them
	cfg.WritesPerSecond, cfg.WriteBurst = 20, 6
	cfg.DampDegraded = 0
	cfg.Listen, cfg.HTTPAddr, cfg.MetricsAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.TLSCert, cfg.TLSKey = files.CertFile, files.KeyFile
	require.NoError(t, cfg.Validate())
	return cfg
}

type replica struct {
	app    *App
	cancel context.CancelFunc
	done   chan error
}

func startReplica(t *testing.T, rc *rest.Config, cfg config.Config, log *zap.Logger) *replica {
	t.Helper()
	a, err := New(cfg, log.With(zap.String("replica", cfg.Identity)), Options{RestConfig: rc})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{app: a, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- a.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

func (r *replica) stop(t *testing.T) {
	r.cancel()
	select {
	case err := <-r.done:
		assert.NoError(t, err)
		r.done <- nil
	case <-time.After(30 * time.Second):
		t.Errorf("replica did not stop")
	}
}

// feeder sends every node's report to every replica's sink once per
// interval, as agents stream to every replica.
type feeder struct {
	mu     sync.Mutex
	seq    uint64
	status map[string]report.Status
	sinks  []*App
}

// feed starts a feeder of status to apps, every second, until stop or the
// end of the test.
func feed(ctx context.Context, t *testing.T, status map[string]report.Status, apps ...*App) (f *feeder, stop context.CancelFunc) {
	f = &feeder{status: status, sinks: apps}
	fctx, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	go f.run(fctx, time.Second)
	return f, stop
}

func (f *feeder) set(node string, s report.Status) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.status[node] = s
}

func (f *feeder) drop(node string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.status, node)
}

func (f *feeder) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		f.mu.Lock()
		f.seq++
		now := time.Now()
		for node, s := range f.status {
			r := reporttest.Disk(node, f.seq, now, s)
			r.Interval = time.Second
			for _, a := range f.sinks {
				a.State().Accept(r, now)
			}
		}
		f.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func getHealth(ctx context.Context, hc versioned.Interface, name string) (*healthv1alpha1.Health, error) {
	return hc.HealthV1alpha1().Healths(testNS).Get(ctx, name, metav1.GetOptions{})
}

// TestWriterAppliesHealthObjects: the leader creates every component's
// Health object with its spec, applies status with one field manager,
// follows changes, prunes deleted nodes, and serves probes and metrics.
func TestWriterAppliesHealthObjects(t *testing.T) {
	cp := startPlane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs := cp.Clientset()
	for _, n := range []string{"node-a", "node-b", "node-c"} {
		_, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	hc, err := versioned.NewForConfig(cp.Config)
	require.NoError(t, err)

	// Every line the replica logs names exactly one component.
	obs, logged := observer.New(zap.InfoLevel)
	defer func() {
		require.NotZero(t, logged.Len())
		for _, e := range logged.All() {
			n := 0
			for _, f := range e.Context {
				if f.Key == logging.ComponentKey {
					n++
				}
			}
			assert.Equal(t, 1, n, "%q carries %d component fields: %v", e.Message, n, e.Context)
		}
	}()
	r := startReplica(t, cp.Config, testConfig(t, "replica-1"), zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel),
		zaptest.WrapOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core { return zapcore.NewTee(c, obs) }))))
	f, _ := feed(ctx, t, map[string]report.Status{"node-a": report.StatusHealthy, "node-b": report.StatusHealthy, "node-c": report.StatusHealthy}, r.app)

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, comp := range report.NodeComponents {
			h, err := getHealth(ctx, hc, comp)
			if !assert.NoError(c, err) {
				return
			}
			assert.Equal(c, comp, h.Spec.Component)
			if assert.NotNil(c, h.Spec.SLA) && assert.NotNil(c, h.Spec.SLA.FreshFor) {
				assert.Equal(c, 6*time.Second, h.Spec.SLA.FreshFor.Duration)
			}
			switch comp {
			case report.ComponentDisk, report.ComponentNode:
				assert.Equal(c, healthv1alpha1.StatusHealthy, h.Status.Overall, comp)
				assert.Len(c, h.Status.Nodes, 3, comp)
			default:
				assert.Equal(c, healthv1alpha1.StatusUnknown, h.Status.Overall, "%s: nobody observes it: Unknown, never Healthy", comp)
			}
			if assert.NotNil(c, h.Status.FreshUntil) {
				assert.True(c, h.Status.FreshUntil.After(time.Now()), comp)
			}
			for _, mf := range h.ManagedFields {
				assert.Equal(c, writer.FieldManager, mf.Manager)
			}
		}
	}, time.Minute, 200*time.Millisecond)

	// A disk goes Down on node-b: the object follows, the node is pinned;
	// disk as a whole is Degraded (Down on one node of three is that
	// node's, not the cluster's).
	f.set("node-b", report.StatusDown)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		h, err := getHealth(ctx, hc, report.ComponentDisk)
		if !assert.NoError(c, err) {
			return
		}
		assert.Equal(c, healthv1alpha1.StatusDegraded, h.Status.Overall)
		assert.Equal(c, healthv1alpha1.StatusDown, h.Status.Nodes["node-b"].Status)
		assert.Equal(c, "node-b", h.Status.DegradedNodes)
		assert.Equal(c, int32(2), h.Status.Issues, "the node's condition and the type summary")
		var pinned bool
		for _, cond := range h.Status.Conditions {
			if cond.ResourceRef != nil && cond.ResourceRef.Kind == "Node" && cond.ResourceRef.Name == "node-b" {
				pinned = true
				assert.Equal(c, healthv1alpha1.ConditionFalse, cond.Status)
				assert.Equal(c, "FsyncProbe", cond.Type)
			}
		}
		assert.True(c, pinned, "node-b's condition is pinned to it")
	}, 30*time.Second, 200*time.Millisecond)

	// printer columns read the summary fields.
	out, err := cp.Kubectl(ctx, "get", "chz", "-n", testNS, "disk")
	require.NoError(t, err)
	assert.Regexp(t, `disk\s+Degraded\s+node-b\s+2\s+`, out)

	// node-c is deleted from Kubernetes: pruned from every object.
	f.drop("node-c")
	require.NoError(t, cs.CoreV1().Nodes().Delete(ctx, "node-c", metav1.DeleteOptions{}))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, comp := range []string{report.ComponentDisk, report.ComponentNode} {
			h, err := getHealth(ctx, hc, comp)
			if assert.NoError(c, err) {
				assert.NotContains(c, h.Status.Nodes, "node-c", comp)
				assert.Len(c, h.Status.Nodes, 2, comp)
			}
		}
	}, 30*time.Second, 200*time.Millisecond)

	// Probes and metrics.
	body := httpGet(t, "http://"+r.app.HTTPAddr()+"/readyz")
	assert.Equal(t, "ok\n", body)
	metricsText := httpGet(t, "http://"+r.app.MetricsAddr()+"/metrics")
	assert.Contains(t, metricsText, `cozy_health_component_status{component="disk",namespace="cozy-system",status="Degraded"} 1`)
	assert.Contains(t, metricsText, `cozy_health_node_status{component="disk",node="node-b",status="Down"} 1`)
	assert.Contains(t, metricsText, "cozy_health_leader 1")
	assert.Regexp(t, `cozy_health_writes_total\{result="success"\} [1-9]`, metricsText)
	assert.Contains(t, metricsText, "cozy_health_reports_received_total")
	assert.Contains(t, metricsText, "grpc_server_started_total")
	assert.Contains(t, metricsText, "process_resident_memory_bytes")
	assert.NotContains(t, metricsText, `node="node-c"`, "label sets of a deleted node are gone")
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	return string(b)
}

// freshnessWatch polls every object and records any moment an object's
// freshUntil had lapsed.
func freshnessWatch(ctx context.Context, hc versioned.Interface, lapses chan<- string) {
	for ctx.Err() == nil {
		list, err := hc.HealthV1alpha1().Healths(testNS).List(ctx, metav1.ListOptions{})
		now := time.Now()
		if err == nil {
			for _, h := range list.Items {
				if h.Status.FreshUntil != nil && !h.Status.FreshUntil.After(now) {
					select {
					case lapses <- fmt.Sprintf("%s: freshUntil %s <= now %s", h.Name, h.Status.FreshUntil.UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano)):
					default:
					}
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func leaseHolder(ctx context.Context, cp *harness.ControlPlane) string {
	l, err := cp.Clientset().CoordinationV1().Leases(testNS).Get(ctx, "cozy-health-aggregator", metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// TestLeaderFailover: two replicas receive every report; only the leader
// writes. Cancelling the leader's context hands the Lease over; the other
// replica writes within the lease duration and no object's freshUntil
// lapses while one replica is alive.
func TestLeaderFailover(t *testing.T) {
	cp := startPlane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	hc, err := versioned.NewForConfig(cp.Config)
	require.NoError(t, err)
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	r1 := startReplica(t, cp.Config, testConfig(t, "replica-1"), log)
	r2 := startReplica(t, cp.Config, testConfig(t, "replica-2"), log)
	f, _ := feed(ctx, t, map[string]report.Status{"node-a": report.StatusHealthy, "node-b": report.StatusHealthy}, r1.app, r2.app)

	var holder string
	require.Eventually(t, func() bool { holder = leaseHolder(ctx, cp); return holder != "" }, time.Minute, 100*time.Millisecond)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		h, err := getHealth(ctx, hc, report.ComponentDisk)
		if assert.NoError(c, err) {
			assert.Equal(c, healthv1alpha1.StatusHealthy, h.Status.Overall)
		}
	}, time.Minute, 200*time.Millisecond)

	lapses := make(chan string, 16)
	wctx, wstop := context.WithCancel(ctx)
	watchDone := make(chan struct{})
	go func() { freshnessWatch(wctx, hc, lapses); close(watchDone) }()

	leaderR, other := r1, r2
	if holder == "replica-2" {
		leaderR, other = r2, r1
	}
	time.Sleep(3 * time.Second)
	before, err := getHealth(ctx, hc, report.ComponentDisk)
	require.NoError(t, err)
	killedAt := time.Now()
	leaderR.stop(t)

	// The other replica holds the Lease and writes within the lease duration.
	require.Eventually(t, func() bool { return leaseHolder(ctx, cp) == other.app.cfg.Identity }, 3*time.Second+2*time.Second, 100*time.Millisecond)
	require.Eventually(t, func() bool {
		h, err := getHealth(ctx, hc, report.ComponentDisk)
		return err == nil && h.Status.ObservedAt.After(before.Status.ObservedAt.Time) && h.ResourceVersion != before.ResourceVersion
	}, 3*time.Second+3*time.Second, 100*time.Millisecond)
	t.Logf("failover: new leader wrote %s after the old one stopped", time.Since(killedAt).Round(time.Millisecond))

	// The new leader follows changes it alone now sees through.
	f.set("node-a", report.StatusDegraded)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		h, err := getHealth(ctx, hc, report.ComponentDisk)
		if assert.NoError(c, err) {
			assert.Equal(c, healthv1alpha1.StatusDegraded, h.Status.Overall)
		}
	}, 30*time.Second, 200*time.Millisecond)
	// Keep watching through several refresh periods.
	time.Sleep(8 * time.Second)
	wstop()
	<-watchDone
	close(lapses)
	for l := range lapses {
		t.Errorf("freshUntil lapsed while a replica was alive: %s", l)
	}
}

// TestAPIServerOutage: the apiserver is stopped long enough for the leader
// to lose the Lease; the aggregator keeps ingesting, does not crash, and
// when the apiserver is back it leads again and the objects catch up.
func TestAPIServerOutage(t *testing.T) {
	cp := startPlane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	hc, err := versioned.NewForConfig(cp.Config)
	require.NoError(t, err)
	r := startReplica(t, cp.Config, testConfig(t, "replica-1"), zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)))
	f, _ := feed(ctx, t, map[string]report.Status{"node-a": report.StatusHealthy, "node-b": report.StatusHealthy}, r.app)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		h, err := getHealth(ctx, hc, report.ComponentDisk)
		if assert.NoError(c, err) {
			assert.Equal(c, healthv1alpha1.StatusHealthy, h.Status.Overall)
		}
	}, time.Minute, 200*time.Millisecond)

	if err := cp.StopAPIServer(); err != nil {
		// The harness kills an apiserver that does not exit within its
		// SIGTERM grace; it is down either way.
		t.Logf("stop apiserver: %v", err)
	}
	_, err = getHealth(ctx, hc, report.ComponentDisk)
	require.Error(t, err, "the apiserver is down")
	// While it is down: state changes, the replica keeps ingesting.
	f.set("node-b", report.StatusDown)
	time.Sleep(10 * time.Second)
	select {
	case err := <-r.done:
		t.Fatalf("aggregator stopped during the outage: %v", err)
	default:
	}
	e, ok := r.app.State().Get("node-b")
	require.True(t, ok)
	assert.WithinDuration(t, time.Now(), e.ReceivedAt, 3*time.Second, "still ingesting")
	assert.Equal(t, report.StatusDegraded, r.app.Engine().Latest()[report.ComponentDisk].Overall, "still rolling up")

	require.NoError(t, cp.StartAPIServer(ctx))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		h, err := getHealth(ctx, hc, report.ComponentDisk)
		if assert.NoError(c, err) {
			assert.Equal(c, healthv1alpha1.StatusDegraded, h.Status.Overall)
			assert.Equal(c, healthv1alpha1.StatusDown, h.Status.Nodes["node-b"].Status)
			assert.True(c, h.Status.FreshUntil.After(time.Now()))
		}
	}, time.Minute, 250*time.Millisecond)
	metricsText := httpGet(t, "http://"+r.app.MetricsAddr()+"/metrics")
	assert.Regexp(t, `cozy_health_writes_total\{result="error"\} [1-9]`, metricsText, "the failed writes were counted")
}

// TestDeployRBACSuffices runs a replica as the ServiceAccount of
// the chart's aggregator RBAC, applied from the plain manifests (an x509 user with its name, which RBAC
// matches like the ServiceAccount): the manifests grant all it needs, and
// the agents' ServiceAccount cannot write Health objects.
func TestDeployRBACSuffices(t *testing.T) {
	cp := startPlane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	require.NoError(t, cp.InstallTalosServiceAccountCRD(ctx))
	// Where Cozystack runs LINSTOR: the manifests' Role on its client
	// certificate Secret lives there.
	require.NoError(t, cp.EnsureNamespace(ctx, "cozy-linstor"))
	out, err := cp.Kubectl(ctx, "apply", "--server-side", "-f", filepath.Join(harness.RepoRoot(), deploy.ManifestsFile))
	require.NoError(t, err, out)
	_, err = cp.Clientset().CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, metav1.CreateOptions{})
	require.NoError(t, err)

	rc, err := cp.UserConfig("system:serviceaccount:cozy-health:cozy-health-aggregator", "system:serviceaccounts", "system:serviceaccounts:cozy-health", "system:authenticated")
	require.NoError(t, err)
	r := startReplica(t, rc, testConfig(t, "rbac-replica"), zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)))
	f, _ := feed(ctx, t, map[string]report.Status{"node-a": report.StatusHealthy}, r.app)

	hc, err := versioned.NewForConfig(cp.Config)
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, comp := range report.NodeComponents {
			h, err := getHealth(ctx, hc, comp)
			if assert.NoError(c, err) {
				assert.NotNil(c, h.Status.FreshUntil, comp)
			}
		}
	}, time.Minute, 250*time.Millisecond)
	// Node deletion is seen through the ServiceAccount's watch.
	f.drop("node-a")
	require.NoError(t, cp.Clientset().CoreV1().Nodes().Delete(ctx, "node-a", metav1.DeleteOptions{}))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		h, err := getHealth(ctx, hc, report.ComponentNode)
		if assert.NoError(c, err) {
			assert.Empty(c, h.Status.Nodes)
		}
	}, 30*time.Second, 250*time.Millisecond)

	agentRC, err := cp.UserConfig("system:serviceaccount:cozy-health:cozy-health-agent", "system:serviceaccounts", "system:authenticated")
	require.NoError(t, err)
	ahc, err := versioned.NewForConfig(agentRC)
	require.NoError(t, err)
	h, err := getHealth(ctx, hc, report.ComponentDisk)
	require.NoError(t, err)
	h.Status.Overall = healthv1alpha1.StatusHealthy
	_, err = ahc.HealthV1alpha1().Healths(testNS).UpdateStatus(ctx, h, metav1.UpdateOptions{})
	require.Error(t, err)
	assert.True(t, apierrors.IsForbidden(err), "%v", err)
}

// TestNodesThatNeverReportedReadUnknown: a Kubernetes Node selected by
// --node-selector whose agent never reached this replica is listed
// Unknown/HeartbeatMissed, never left out (which would let the object read
// Healthy); a Node outside the selector is not expected; deleting the Node
// prunes it.
func TestNodesThatNeverReportedReadUnknown(t *testing.T) {
	cp := startPlane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	nodes := cp.Clientset().CoreV1().Nodes()
	noAgent := map[string]string{"health.cozystack.io/agent": "false"}
	for name, lbl := range map[string]map[string]string{"node-a": nil, "node-silent": nil, "node-excluded": noAgent} {
		_, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbl}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	cfg := testConfig(t, "expect-replica")
	cfg.NodeSelector = "health.cozystack.io/agent!=false"
	require.NoError(t, cfg.Validate())
	r := startReplica(t, cp.Config, cfg, zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)))
	f, _ := feed(ctx, t, map[string]report.Status{"node-a": report.StatusHealthy}, r.app)

	hc, err := versioned.NewForConfig(cp.Config)
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		h, err := getHealth(ctx, hc, report.ComponentNode)
		if !assert.NoError(c, err) {
			return
		}
		assert.Equal(c, healthv1alpha1.StatusUnknown, h.Status.Overall, "a node without data is Unknown, so the object is")
		assert.Equal(c, healthv1alpha1.StatusHealthy, h.Status.Nodes["node-a"].Status)
		silent, ok := h.Status.Nodes["node-silent"]
		if assert.True(c, ok, "the silent node is listed") {
			assert.Equal(c, healthv1alpha1.StatusUnknown, silent.Status)
			assert.Equal(c, report.ReasonHeartbeatMissed, silent.Reason)
			assert.Contains(c, silent.Message, "no report from this node's agent")
			assert.Nil(c, silent.LastReportAt, "never heard: no last report time")
		}
		assert.NotContains(c, h.Status.Nodes, "node-excluded")
		// Only the node component lists a node nothing is known about.
		d, err := getHealth(ctx, hc, report.ComponentDisk)
		if assert.NoError(c, err) {
			assert.Equal(c, healthv1alpha1.StatusHealthy, d.Status.Overall)
			assert.NotContains(c, d.Status.Nodes, "node-silent")
		}
	}, time.Minute, 250*time.Millisecond)
	metricsText := httpGet(t, "http://"+r.app.MetricsAddr()+"/metrics")
	assert.Contains(t, metricsText, `cozy_health_node_status{component="node",node="node-silent",status="Unknown"} 1`)

	// Its labels leave the selector: no longer expected, no longer listed.
	silent, err := nodes.Get(ctx, "node-silent", metav1.GetOptions{})
	require.NoError(t, err)
	silent.Labels = noAgent
	_, err = nodes.Update(ctx, silent, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		h, err := getHealth(ctx, hc, report.ComponentNode)
		if assert.NoError(c, err) {
			assert.NotContains(c, h.Status.Nodes, "node-silent")
			assert.Equal(c, healthv1alpha1.StatusHealthy, h.Status.Overall)
		}
	}, 30*time.Second, 250*time.Millisecond)

	// A node that reports is listed whatever its labels; deleting it prunes it.
	excluded, err := nodes.Get(ctx, "node-excluded", metav1.GetOptions{})
	require.NoError(t, err)
	f.set("node-excluded", report.StatusHealthy)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		h, err := getHealth(ctx, hc, report.ComponentNode)
		if assert.NoError(c, err) {
			assert.Equal(c, healthv1alpha1.StatusHealthy, h.Status.Nodes["node-excluded"].Status)
		}
	}, 30*time.Second, 250*time.Millisecond)
	f.drop("node-excluded")
	require.NoError(t, nodes.Delete(ctx, excluded.Name, metav1.DeleteOptions{}))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		h, err := getHealth(ctx, hc, report.ComponentNode)
		if assert.NoError(c, err) {
			assert.NotContains(c, h.Status.Nodes, "node-excluded")
		}
	}, 30*time.Second, 250*time.Millisecond)
}

// TestNewLeaderKeepsLastTransitionTime: a replica started after the
// leader published a fault takes over with the fault's lastTransitionTime
// as the object says it, not the time of its own start.
func TestNewLeaderKeepsLastTransitionTime(t *testing.T) {
	cp := startPlane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	hc, err := versioned.NewForConfig(cp.Config)
	require.NoError(t, err)
	log := zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel))
	status := map[string]report.Status{"node-a": report.StatusHealthy, "node-b": report.StatusDegraded}
	slowCondition := func(h *healthv1alpha1.Health) *healthv1alpha1.HealthCondition {
		for i, c := range h.Status.Conditions {
			if c.ResourceRef != nil && c.ResourceRef.Name == "node-b" && c.Status == healthv1alpha1.ConditionFalse {
				return &h.Status.Conditions[i]
			}
		}
		return nil
	}

	first := startReplica(t, cp.Config, testConfig(t, "first"), log)
	_, f1stop := feed(ctx, t, maps.Clone(status), first.app)
	var since metav1.Time
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		h, err := getHealth(ctx, hc, report.ComponentDisk)
		if assert.NoError(c, err) {
			cond := slowCondition(h)
			if assert.NotNil(c, cond, "node-b's condition") {
				since = cond.LastTransitionTime
			}
		}
	}, time.Minute, 250*time.Millisecond)
	f1stop()
	first.stop(t)

	// lastTransitionTime has a precision of one second: start the second
	// replica well after it.
	time.Sleep(2500 * time.Millisecond)
	secondStart := time.Now()
	second := startReplica(t, cp.Config, testConfig(t, "second"), log)
	feed(ctx, t, maps.Clone(status), second.app)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		h, err := getHealth(ctx, hc, report.ComponentDisk)
		if !assert.NoError(c, err) {
			return
		}
		assert.True(c, h.Status.ObservedAt.After(secondStart), "the second replica writes")
		if cond := slowCondition(h); assert.NotNil(c, cond) {
			assert.True(c, since.Equal(&cond.LastTransitionTime), "lastTransitionTime %s, the first leader published %s", cond.LastTransitionTime, since)
		}
	}, time.Minute, 250*time.Millisecond)
}

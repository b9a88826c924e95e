package linstorview

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/cozystack/cozy-health/aggregator/internal/drain"
	"github.com/cozystack/cozy-health/aggregator/internal/metrics"
	"github.com/cozystack/cozy-health/aggregator/internal/state"
	"github.com/cozystack/cozy-health/deploy/render"
	"github.com/cozystack/cozy-health/pkg/linstorapi"
	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/test/harness"
	"github.com/cozystack/cozy-health/test/sources/fault"
	linstorsrc "github.com/cozystack/cozy-health/test/sources/linstor"
	"github.com/cozystack/cozy-health/test/sources/machined"
)

// readUntil reads the view until cond holds (the Secret's watch event may
// not have reached the informer at the first read), at most a minute.
func readUntil(t *testing.T, r *Reader, cond func(v *View) bool) *View {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		r.ReadNow(context.Background())
		v := r.View()
		if cond(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("view never as expected; last: %+v", v)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSecretWhereItLives: a real apiserver, the chart's Role and
// RoleBinding on Secret cozy-linstor/linstor-client-tls, the aggregator
// acting as its ServiceAccount, and a LINSTOR controller behind mutual TLS.
// Before the Secret exists the view is never read (Unknown, saying so);
// once cert-manager writes it the view is read with it; a renewal is used
// at the next read, no restart; the Role grants that one Secret only.
func TestSecretWhereItLives(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cp := harness.Start(t)
	admin := cp.Clientset()
	for _, ns := range []string{"cozy-linstor", "cozy-health"} {
		_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	rel, err := render.Render(render.Options{Namespace: "cozy-health", APIVersions: []string{"piraeus.io/v1"}})
	require.NoError(t, err)
	roleObj, err := rel.Object("Role", "cozy-health-aggregator-linstor-client")
	require.NoError(t, err)
	var role rbacv1.Role
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(roleObj.Object, &role))
	_, err = admin.RbacV1().Roles(role.Namespace).Create(ctx, &role, metav1.CreateOptions{})
	require.NoError(t, err)
	rbObj, err := rel.Object("RoleBinding", "cozy-health-aggregator-linstor-client")
	require.NoError(t, err)
	var rb rbacv1.RoleBinding
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(rbObj.Object, &rb))
	_, err = admin.RbacV1().RoleBindings(rb.Namespace).Create(ctx, &rb, metav1.CreateOptions{})
	require.NoError(t, err)
	// The aggregator's ServiceAccount, by its user name.
	saCfg, err := cp.UserConfig("system:serviceaccount:cozy-health:cozy-health-aggregator", "system:serviceaccounts", "system:serviceaccounts:cozy-health", "system:authenticated")
	require.NoError(t, err)
	sa, err := kubernetes.NewForConfig(saCfg)
	require.NoError(t, err)

	pki, err := machined.NewPKI([]string{"127.0.0.1"}, []string{"linstor-client"}, time.Hour)
	require.NoError(t, err)
	srv, err := linstorsrc.Start("", pki.ServerTLS())
	require.NoError(t, err)
	defer srv.Close()
	for _, n := range []string{"node-0", "node-1"} {
		srv.SetNode(n, "ONLINE")
		srv.SetReplica(linstorsrc.Replica{Resource: "pvc-a", Node: n, DiskState: "UpToDate"})
	}

	r, err := New(Config{URL: srv.URL, SecretNamespace: "cozy-linstor", SecretName: "linstor-client-tls", Interval: time.Hour}, sa, zaptest.NewLogger(t), nil)
	require.NoError(t, err)
	go func() { _ = r.Run(ctx) }()

	v := readUntil(t, r, func(v *View) bool { return v.Err != nil && v.Gen > 0 })
	assert.True(t, v.ObservedAt.IsZero())
	f := r.Facts(time.Now())
	assert.Equal(t, ReasonNeverRead, f.Reason)
	reps, why := r.Replicas(time.Now())
	assert.Empty(t, reps)
	assert.Contains(t, why, "has not been read")
	assert.Zero(t, srv.Requests()["/v1/nodes"], "no request without a client certificate")

	// cert-manager writes the Secret.
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "linstor-client-tls", Namespace: "cozy-linstor"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"ca.crt": pki.CAPEM, "tls.crt": pki.ClientCertPEM, "tls.key": pki.ClientKeyPEM}}
	_, err = admin.CoreV1().Secrets("cozy-linstor").Create(ctx, secret, metav1.CreateOptions{})
	require.NoError(t, err)
	v = readUntil(t, r, func(v *View) bool { return v.Err == nil })
	assert.Len(t, v.Replicas, 2)
	f = r.Facts(time.Now())
	assert.True(t, f.Fresh(time.Now()))
	assert.Equal(t, report.StatusHealthy, f.Nodes["node-0"][0].Status)
	assert.Equal(t, "SatelliteOnline", f.Nodes["node-0"][0].Reason)

	// A renewal written half (a new certificate with the old key): the next
	// read uses it, and says what is wrong.
	crt, key, err := pki.IssueClient([]string{"linstor-client"}, time.Hour)
	require.NoError(t, err)
	secret.Data["tls.crt"] = crt
	_, err = admin.CoreV1().Secrets("cozy-linstor").Update(ctx, secret, metav1.UpdateOptions{})
	require.NoError(t, err)
	v = readUntil(t, r, func(v *View) bool { return v.Err != nil })
	assert.Contains(t, v.Err.Error(), "tls.crt and tls.key")
	assert.False(t, v.ObservedAt.IsZero(), "the last good read is kept, with its time")
	// ... and the complete one: read again.
	secret.Data["tls.key"] = key
	_, err = admin.CoreV1().Secrets("cozy-linstor").Update(ctx, secret, metav1.UpdateOptions{})
	require.NoError(t, err)
	readUntil(t, r, func(v *View) bool { return v.Err == nil })

	// Three requests per read, whatever the node count.
	before := srv.Requests()
	r.ReadNow(ctx)
	after := srv.Requests()
	assert.Equal(t, 1, after["/v1/nodes"]-before["/v1/nodes"])
	assert.Equal(t, 1, after["/v1/view/resources"]-before["/v1/view/resources"])
	assert.Equal(t, 1, after["/v1/view/storage-pools"]-before["/v1/view/storage-pools"])

	// The Role grants that one Secret, nothing else in cozy-linstor.
	_, err = admin.CoreV1().Secrets("cozy-linstor").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "linstor-passphrase", Namespace: "cozy-linstor"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = sa.CoreV1().Secrets("cozy-linstor").Get(ctx, "linstor-passphrase", metav1.GetOptions{})
	assert.True(t, apierrors.IsForbidden(err), "%v", err)
	_, err = sa.CoreV1().Secrets("cozy-linstor").List(ctx, metav1.ListOptions{})
	assert.True(t, apierrors.IsForbidden(err), "list without the name's field selector: %v", err)
	_, err = sa.CoreV1().Secrets("cozy-linstor").Get(ctx, "linstor-client-tls", metav1.GetOptions{})
	assert.NoError(t, err)
}

// TestFreshness: a view read once goes Unknown past FreshFor, naming its
// last read; the controller failing keeps the last answer's time.
func TestFreshness(t *testing.T) {
	srv, err := linstorsrc.Start("", nil)
	require.NoError(t, err)
	defer srv.Close()
	srv.SetNode("node-0", "OFFLINE")
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	r, err := New(Config{URL: srv.URL, Interval: time.Second, Metrics: m}, nil, zaptest.NewLogger(t), nil)
	require.NoError(t, err)
	r.ReadNow(context.Background())
	v := r.View()
	require.NoError(t, v.Err)
	f := r.Facts(v.ObservedAt)
	assert.True(t, f.Fresh(v.ObservedAt))
	assert.Equal(t, report.StatusDown, f.Nodes["node-0"][0].Status)

	late := v.ObservedAt.Add(3*time.Second + time.Nanosecond)
	f = r.Facts(late)
	assert.Equal(t, ReasonViewStale, f.Reason)
	assert.False(t, f.Fresh(late))
	_, why := r.Replicas(late)
	assert.Contains(t, why, "as last read at")

	require.NoError(t, srv.Close())
	r.ReadNow(context.Background())
	v2 := r.View()
	require.Error(t, v2.Err)
	assert.Equal(t, v.ObservedAt, v2.ObservedAt)
	assert.Greater(t, v2.Gen, v.Gen)
	gen := v2.Gen
	r.ReadNow(context.Background())
	assert.Equal(t, gen, r.View().Gen, "the same failure again is nothing new to judge")
	assert.Equal(t, 2.0, series(t, reg, "cozy_health_adapter_errors_total", map[string]string{"adapter": Name, "reason": "read"}), "every failed read counted")
	assert.Equal(t, 0.0, series(t, reg, "cozy_health_adapter_synced", map[string]string{"adapter": Name}))

	// The figures of the note: requests per second against node count.
	assert.InDelta(t, 0.9, Rate(3, 10*time.Second), 1e-9)
}

// TestPlacement: the drain reads the replicas with the storage pools of
// the same read; a controller that does not answer the pools (here: 404,
// as a controller without the endpoint) keeps the replicas judged and says
// why the pools are unknown; the next read that gets them clears it.
func TestPlacement(t *testing.T) {
	srv, err := linstorsrc.Start("", nil)
	require.NoError(t, err)
	defer srv.Close()
	srv.SetNode("node-0", "ONLINE")
	srv.SetNode("node-1", "OFFLINE")
	srv.SetPoolFree("node-0", 10<<20)
	srv.SetReplica(linstorsrc.Replica{Resource: "pvc-a", Node: "node-0", DiskState: "UpToDate"})
	target, err := url.Parse(srv.URL)
	require.NoError(t, err)
	var refuse atomic.Bool
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if refuse.Load() && req.URL.Path == "/v1/view/storage-pools" {
			http.NotFound(w, req)
			return
		}
		proxy.ServeHTTP(w, req)
	}))
	defer front.Close()
	r, err := New(Config{URL: front.URL, Interval: time.Second}, nil, zaptest.NewLogger(t), nil)
	require.NoError(t, err)

	r.ReadNow(context.Background())
	p, why := r.Placement(r.View().ObservedAt)
	require.Empty(t, why)
	require.Empty(t, p.PoolsWhy)
	require.Len(t, p.Replicas, 1)
	assert.Equal(t, linstorsrc.ReplicaSizeKiB, p.Replicas[0].SizeKiB)
	assert.Equal(t, map[string]string{"node-0": "ONLINE", "node-1": "OFFLINE"}, p.Satellites)
	assert.Equal(t, []linstorapi.PoolRoom{
		{Node: "node-0", Pool: linstorsrc.PoolDiskless, Kind: "DISKLESS", Class: linstorapi.PoolNoData, FreeKiB: math.MaxInt64, TotalKiB: math.MaxInt64},
		{Node: "node-0", Pool: linstorsrc.PoolThin, Kind: "LVM_THIN", Class: linstorapi.PoolThin, FreeKiB: 10 << 20, TotalKiB: linstorsrc.PoolTotalKiB},
		{Node: "node-1", Pool: linstorsrc.PoolDiskless, Kind: "DISKLESS", Class: linstorapi.PoolNoData, FreeKiB: -1, TotalKiB: -1},
		{Node: "node-1", Pool: linstorsrc.PoolThin, Kind: "LVM_THIN", Class: linstorapi.PoolThin, FreeKiB: -1, TotalKiB: -1},
	}, p.Pools, "an OFFLINE satellite's capacities are not known")

	refuse.Store(true)
	r.ReadNow(context.Background())
	v := r.View()
	require.NoError(t, v.Err, "the pools failing does not fail the view")
	p, why = r.Placement(v.ObservedAt)
	require.Empty(t, why)
	assert.Len(t, p.Replicas, 1)
	assert.Nil(t, p.Pools)
	assert.Contains(t, p.PoolsWhy, "storage pools were not read")
	assert.Contains(t, p.PoolsWhy, "HTTP 404")

	refuse.Store(false)
	r.ReadNow(context.Background())
	p, _ = r.Placement(r.View().ObservedAt)
	assert.Empty(t, p.PoolsWhy)
	assert.Len(t, p.Pools, 4)

	_, why = r.Placement(r.View().ObservedAt.Add(time.Hour))
	assert.Contains(t, why, "as last read at", "a stale view has no placement")
}

// series reads one series of reg.
func series(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s%v", name, labels)
	return 0
}

// TestDrainViewUnknownOnceAReadFails (issue 34, case 5): the rollup keeps
// the last view for FreshFor, but a drain reads it only while the latest
// read succeeded: one failed read, and the drain rules get no replicas and
// why, at once (they used to read the last view for up to ~35 s).
func TestDrainViewUnknownOnceAReadFails(t *testing.T) {
	srv, err := linstorsrc.Start("", nil)
	require.NoError(t, err)
	defer srv.Close()
	srv.SetNode("node-0", "ONLINE")
	srv.SetReplica(linstorsrc.Replica{Resource: "pvc-a", Node: "node-0", DiskState: "UpToDate"})
	r, err := New(Config{URL: srv.URL, Interval: 10 * time.Second}, nil, zaptest.NewLogger(t), nil)
	require.NoError(t, err)
	r.ReadNow(context.Background())
	v := r.View()
	require.NoError(t, v.Err)
	reps, why := r.Replicas(v.ObservedAt)
	require.Empty(t, why)
	require.Len(t, reps, 1)

	srv.Fault.Set(fault.Garbage)
	r.ReadNow(context.Background())
	require.Error(t, r.View().Err)
	now := v.ObservedAt.Add(time.Second) // well within FreshFor (30 s)
	assert.True(t, r.Facts(now).Fresh(now), "the rollup still shows the last view, marked by its time")
	reps, why = r.Replicas(now)
	assert.Empty(t, reps)
	assert.Contains(t, why, "the latest read of the LINSTOR controller's view failed")
}

// TestSatelliteConnectingIsUnknownForABoundedTime (issue 34, case 4):
// CONNECTED and AUTHENTICATED, passed through on every controller restart,
// read Unknown until linstorapi.SatelliteConnectingBound, then Degraded;
// ONLINE again resets the clock.
func TestSatelliteConnectingIsUnknownForABoundedTime(t *testing.T) {
	srv, err := linstorsrc.Start("", nil)
	require.NoError(t, err)
	defer srv.Close()
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC))
	r, err := New(Config{URL: srv.URL, Interval: 10 * time.Second}, nil, zaptest.NewLogger(t), clk)
	require.NoError(t, err)
	satellite := func() report.Observation {
		r.ReadNow(context.Background())
		return r.View().Observations["node-0"][0]
	}
	srv.SetNode("node-0", "CONNECTED")
	assert.Equal(t, report.StatusUnknown, satellite().Status)
	clk.Step(time.Minute)
	srv.SetNode("node-0", "AUTHENTICATED")
	assert.Equal(t, report.StatusUnknown, satellite().Status, "still on its way to ONLINE")
	clk.Step(linstorapi.SatelliteConnectingBound)
	o := satellite()
	assert.Equal(t, report.StatusDegraded, o.Status, "connecting for longer than the bound: stuck")
	assert.Equal(t, "SatelliteAuthenticated", o.Reason)
	srv.SetNode("node-0", "ONLINE")
	assert.Equal(t, report.StatusHealthy, satellite().Status)
	srv.SetNode("node-0", "CONNECTED")
	assert.Equal(t, report.StatusUnknown, satellite().Status, "a new run of connecting starts its own clock")
}

// TestDecommissionOnTheStandIn: from the controller's REST answers (the
// stand-in, golinstor's types) through the reader to the drain's
// decommission verdict: node-0's replica of pvc-a can go to node-2, whose
// thin pool has room (safe); with node-2's pool nearly full it may not
// (unknown: a thin resync may write less than the full size); with
// node-2's satellite OFFLINE it cannot (blocked).
func TestDecommissionOnTheStandIn(t *testing.T) {
	srv, err := linstorsrc.Start("", nil)
	require.NoError(t, err)
	defer srv.Close()
	for _, n := range []string{"node-0", "node-1", "node-2"} {
		srv.SetNode(n, "ONLINE")
	}
	srv.SetReplica(linstorsrc.Replica{Resource: "pvc-a", Node: "node-0", DiskState: "UpToDate"})
	srv.SetReplica(linstorsrc.Replica{Resource: "pvc-a", Node: "node-1", DiskState: "UpToDate"})
	r, err := New(Config{URL: srv.URL, Interval: time.Second}, nil, zaptest.NewLogger(t), nil)
	require.NoError(t, err)
	replaceable := func() (drain.Verdict, string) {
		t.Helper()
		r.ReadNow(context.Background())
		now := r.View().ObservedAt
		nodes := map[string]drain.NodeInfo{}
		for _, n := range []string{"node-0", "node-1", "node-2"} {
			nodes[n] = drain.NodeInfo{Exists: true, LastReport: &report.NodeReport{NodeName: n, SentAt: now}, LastHeard: now, Fresh: true,
				FreshUntil: now.Add(time.Minute), Role: state.RoleWorker}
		}
		p, why := r.Placement(now)
		require.Empty(t, why)
		res := drain.EvaluateIntent("node-0", drain.IntentDecommission, drain.NewSnapshot(nodes, now).WithPlacement(p, ""), now)
		for _, x := range res.Reasons {
			if x.Rule == drain.RuleLinstorReplaceable {
				return x.Verdict, x.Message
			}
		}
		t.Fatalf("no %s reason: %+v", drain.RuleLinstorReplaceable, res.Reasons)
		return "", ""
	}
	v, msg := replaceable()
	assert.Equal(t, drain.Safe, v, msg)
	assert.Contains(t, msg, "node-2 pool thinpool has 512.0 GiB free, pvc-a needs 504.0 MiB")

	srv.SetPoolFree("node-2", 100<<10)
	v, msg = replaceable()
	assert.Equal(t, drain.Unknown, v, msg)
	assert.Contains(t, msg, "node-2 (thin pool thinpool has 100.0 MiB free, pvc-a needs up to 504.0 MiB)")

	srv.SetPoolFree("node-2", linstorsrc.DefaultFreeKiB)
	srv.SetNode("node-2", "OFFLINE")
	v, msg = replaceable()
	assert.Equal(t, drain.Blocked, v, msg)
	assert.Contains(t, msg, "node-1 holds a diskful replica of it; node-2 satellite OFFLINE")
}

package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/cozystack/cozy-health/aggregator/internal/app"
	"github.com/cozystack/cozy-health/aggregator/internal/config"
	"github.com/cozystack/cozy-health/aggregator/internal/drain"
	"github.com/cozystack/cozy-health/aggregator/internal/rollup"
	"github.com/cozystack/cozy-health/aggregator/internal/state"
	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/pkg/tlsutil"
	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
	"github.com/cozystack/cozy-health/test/harness"
)

func etcdReport(node string, seq uint64, st report.Status) *report.NodeReport {
	reason := "MemberHealthy"
	if st != report.StatusHealthy {
		reason = "ServiceNotRunning"
	}
	return &report.NodeReport{NodeName: node, AgentInstanceID: "agent-" + node, Sequence: seq, SentAt: time.Now(), Interval: time.Second,
		Observations: []report.Observation{
			{Component: report.ComponentEtcd, Check: report.CheckEtcdMember, Status: st, Reason: reason, Attributes: map[string]float64{report.AttrIsLearner: 0}},
			{Component: report.ComponentEtcd, Check: report.CheckEtcdMembership, Status: report.StatusHealthy, Reason: "MembersListed", Attributes: map[string]float64{report.AttrVotingMembers: 3}},
		}}
}

// TestDrainMountedOnAggregator runs the real aggregator (app.New with the
// drain hooks, as main wires it) against a real apiserver: Nodes come from
// Kubernetes (a cordon is seen), reports from the state, answers over the
// --http-addr listener and the TLS gRPC listener.
func TestDrainMountedOnAggregator(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp := harness.Start(t)
	require.NoError(t, cp.InstallCRDs(ctx))
	require.NoError(t, cp.EnsureNamespace(ctx, "cozy-system"))
	for _, n := range []string{"node-1", "node-2", "node-3", "worker-1"} {
		_, err := cp.Clientset().CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}

	files, err := tlsutil.WriteServing(t.TempDir(), "127.0.0.1", "localhost")
	require.NoError(t, err)
	cfg := config.Default()
	cfg.Identity, cfg.WarmUp = "drain-test", 0
	cfg.ReportInterval, cfg.RollupPeriod, cfg.RefreshPeriod = time.Second, 500*time.Millisecond, 2*time.Second
	cfg.HeartbeatGrace = time.Minute // reports fed once stay fresh for the test
	cfg.Listen, cfg.HTTPAddr, cfg.MetricsAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.TLSCert, cfg.TLSKey = files.CertFile, files.KeyFile
	require.NoError(t, cfg.Validate())

	runCtx, stopRun := context.WithCancel(ctx)
	a, err := app.New(cfg, zaptest.NewLogger(t), app.Options{RestConfig: cp.Config, Hooks: drainHooks(runCtx, cfg, cp.Config)})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	t.Cleanup(func() {
		stopRun()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("aggregator did not stop")
		}
	})

	now := time.Now()
	a.State().Accept(etcdReport("node-1", 1, report.StatusHealthy), now)
	a.State().Accept(etcdReport("node-2", 1, report.StatusHealthy), now)
	a.State().Accept(etcdReport("node-3", 1, report.StatusHealthy), now)

	check := func(c assert.TestingT, node string) (int, map[string]any) {
		resp, err := http.Get("http://" + a.HTTPAddr() + "/v1/drain-check?node=" + node)
		if !assert.NoError(c, err) {
			return 0, nil
		}
		defer resp.Body.Close()
		var body map[string]any
		assert.NoError(c, json.NewDecoder(resp.Body).Decode(&body))
		return resp.StatusCode, body
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		code, body := check(c, "node-1")
		assert.Equal(c, http.StatusOK, code)
		assert.Equal(c, "safe", body["verdict"], body)
	}, time.Minute, 200*time.Millisecond)

	// A Node only Kubernetes knows: unknown (no agent report), never 404.
	code, body := check(t, "worker-1")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "unknown", body["verdict"])
	code, _ = check(t, "ghost")
	assert.Equal(t, http.StatusNotFound, code)

	// Cordon node-3 in Kubernetes: it counts as gone, so node-1 is blocked.
	n3, err := cp.Clientset().CoreV1().Nodes().Get(ctx, "node-3", metav1.GetOptions{})
	require.NoError(t, err)
	n3.Spec.Unschedulable = true
	_, err = cp.Clientset().CoreV1().Nodes().Update(ctx, n3, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, body := check(c, "node-1")
		assert.Equal(c, "blocked", body["verdict"], body)
		if rs, ok := body["reasons"].([]any); assert.True(c, ok) && assert.NotEmpty(c, rs) {
			assert.Equal(c, "etcd: node-1 is a voting member; with node-3 cordoned, draining node-1 leaves 1 of 3 voting members healthy, quorum needs 2",
				rs[0].(map[string]any)["message"])
		}
	}, time.Minute, 200*time.Millisecond)

	// The same answer over the aggregator's TLS gRPC listener.
	caPEM, err := os.ReadFile(files.CAFile)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(caPEM))
	conn, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})))
	require.NoError(t, err)
	defer conn.Close()
	resp, err := pb.NewDrainServiceClient(conn).DrainCheck(ctx, &pb.DrainCheckRequest{Node: "node-1"})
	require.NoError(t, err)
	assert.Equal(t, pb.Verdict_VERDICT_BLOCKED, resp.Verdict)
	_, err = pb.NewDrainServiceClient(conn).DrainCheck(ctx, &pb.DrainCheckRequest{Node: "ghost"})
	assert.Equal(t, codes.NotFound, status.Code(err))
}

func TestDrainHooksRejectUnknownAuthMode(t *testing.T) {
	files, err := tlsutil.WriteServing(t.TempDir(), "127.0.0.1")
	require.NoError(t, err)
	cfg := config.Default()
	cfg.Identity, cfg.WarmUp = "drain-test", 0
	cfg.Listen, cfg.HTTPAddr, cfg.MetricsAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.TLSCert, cfg.TLSKey = files.CertFile, files.KeyFile
	cfg.DrainAuth = "basic"
	require.ErrorContains(t, cfg.Validate(), "--drain-auth")
	// A Config built in code and not validated: no apiserver is contacted
	// before the hooks refuse the mode.
	rc := &rest.Config{Host: "https://127.0.0.1:1"}
	_, err = app.New(cfg, zaptest.NewLogger(t), app.Options{RestConfig: rc, Hooks: drainHooks(context.Background(), cfg, rc)})
	require.ErrorContains(t, err, `--drain-auth: want none or delegated, got "basic"`)
}

// TestStateDrainNodes pins the adapter: heartbeat grace as the rollup
// judges it (fresh at exactly the grace, stale past it), Kubernetes Nodes
// merged in, nodes only one side knows kept.
func TestStateDrainNodes(t *testing.T) {
	st := state.New(nil)
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	st.Accept(etcdReport("node-1", 1, report.StatusHealthy), t0)
	st.Accept(etcdReport("gone-1", 1, report.StatusHealthy), t0.Add(-time.Minute))
	grace := rollup.Config{DefaultInterval: 5 * time.Second}.Grace // reports say 1s: grace 3s

	nodes := st.DrainNodes(t0.Add(3*time.Second), map[string]drain.KubeNode{"node-1": {}, "worker-1": {Cordoned: true}}, grace)
	require.Len(t, nodes, 3)
	n1 := nodes["node-1"]
	assert.True(t, n1.Exists)
	assert.False(t, n1.Cordoned)
	assert.True(t, n1.Fresh, "fresh at exactly the grace, as the rollup judges it")
	assert.Equal(t, t0.Add(3*time.Second), n1.FreshUntil)
	assert.Equal(t, t0, n1.LastHeard)
	require.NotNil(t, n1.LastReport)
	assert.Equal(t, "node-1", n1.LastReport.NodeName)

	w := nodes["worker-1"]
	assert.True(t, w.Exists)
	assert.True(t, w.Cordoned)
	assert.Nil(t, w.LastReport)

	g := nodes["gone-1"]
	assert.False(t, g.Exists, "in the state but not a Kubernetes Node")
	assert.False(t, g.Fresh)

	nodes = st.DrainNodes(t0.Add(3*time.Second+time.Millisecond), nil, grace)
	assert.False(t, nodes["node-1"].Fresh, "stale past the grace")
	assert.False(t, nodes["node-1"].Exists)

	// A Node Kubernetes lists whose agent never reported: the drain check
	// sees a Node with no data, as for one the state never held.
	st.Expect("silent-1", t0)
	nodes = st.DrainNodes(t0, map[string]drain.KubeNode{"silent-1": {}}, grace)
	s := nodes["silent-1"]
	assert.True(t, s.Exists)
	assert.False(t, s.Fresh)
	assert.Nil(t, s.LastReport)
	assert.True(t, s.LastHeard.IsZero())
}

package app

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
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

	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/pkg/tlsutil"
	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
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

// TestDrainMountedOnAggregator runs the real aggregator (New and Run, as
// main does) against a real apiserver: Nodes come from Kubernetes through
// the shared Node informer (a cordon is seen), reports from the state,
// answers over the --http-addr listener and the TLS gRPC listener.
func TestDrainMountedOnAggregator(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp := startPlane(t)
	for _, n := range []string{"node-1", "node-2", "node-3", "worker-1"} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}
		if n != "worker-1" {
			node.Labels = map[string]string{"node-role.kubernetes.io/control-plane": ""}
		}
		_, err := cp.Clientset().CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	cfg := testConfig(t, "drain-test")
	cfg.HeartbeatGrace = time.Minute // reports fed once stay fresh for the test
	require.NoError(t, cfg.Validate())
	a := startReplica(t, cp.Config, cfg, zaptest.NewLogger(t)).app

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

	// A worker (no control-plane label on its Node, as the Node informer
	// says) that claims a healthy etcd member is not believed: node-1
	// stays blocked (counted, its claim would have made it safe).
	a.State().Accept(etcdReport("worker-1", 1, report.StatusHealthy), time.Now())
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, body := check(c, "worker-1") // its report is in the snapshot
		assert.Equal(c, "safe", body["verdict"], body)
	}, time.Minute, 200*time.Millisecond)
	_, body = check(t, "node-1")
	assert.Equal(t, "blocked", body["verdict"], body)

	// The same answer over the aggregator's TLS gRPC listener.
	tc, err := tlsutil.ClientConfig(filepath.Join(filepath.Dir(cfg.TLSCert), "ca.crt"), "127.0.0.1")
	require.NoError(t, err)
	conn, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	require.NoError(t, err)
	defer conn.Close()
	resp, err := pb.NewDrainServiceClient(conn).DrainCheck(ctx, &pb.DrainCheckRequest{Node: "node-1"})
	require.NoError(t, err)
	assert.Equal(t, pb.Verdict_VERDICT_BLOCKED, resp.Verdict)
	_, err = pb.NewDrainServiceClient(conn).DrainCheck(ctx, &pb.DrainCheckRequest{Node: "ghost"})
	assert.Equal(t, codes.NotFound, status.Code(err))
}

func TestNewRejectsUnknownDrainAuthMode(t *testing.T) {
	cfg := testConfig(t, "drain-test")
	cfg.DrainAuth = "basic"
	require.ErrorContains(t, cfg.Validate(), "--drain-auth")
	// A Config built in code and not validated: no apiserver is contacted
	// before New refuses the mode, and the listeners it opened are closed.
	rc := &rest.Config{Host: "https://127.0.0.1:1"}
	_, err := New(cfg, zaptest.NewLogger(t), Options{RestConfig: rc})
	require.ErrorContains(t, err, `--drain-auth: want none or delegated, got "basic"`)
}

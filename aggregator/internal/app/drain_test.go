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
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
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
	// The gRPC port is the ingest port: never anonymous, even with
	// --drain-auth=none (which only the HTTP port, behind the service
	// proxy, honours).
	_, err = pb.NewDrainServiceClient(conn).DrainCheck(ctx, &pb.DrainCheckRequest{Node: "node-1"})
	assert.Equal(t, codes.Unauthenticated, status.Code(err))
	cs := cp.Clientset()
	require.NoError(t, cp.EnsureNamespace(ctx, "drain-users"))
	require.NoError(t, cp.CreateServiceAccount(ctx, "drain-users", "upgrader"))
	_, err = cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "drain-check-test"},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/v1/drain-check"}, Verbs: []string{"get"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "drain-check-test"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "drain-check-test"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "drain-users", Name: "upgrader"}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	tr, err := cs.CoreV1().ServiceAccounts("drain-users").CreateToken(ctx, "upgrader", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	require.NoError(t, err)
	authed := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tr.Status.Token)
	var resp *pb.DrainCheckResponse
	// RBAC reaches the authorizer's cache in a moment; the aggregator
	// caches decisions 10 s.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		resp, err = pb.NewDrainServiceClient(conn).DrainCheck(authed, &pb.DrainCheckRequest{Node: "node-1"})
		assert.NoError(c, err)
	}, time.Minute, time.Second)
	assert.Equal(t, pb.Verdict_VERDICT_BLOCKED, resp.Verdict)
	_, err = pb.NewDrainServiceClient(conn).DrainCheck(authed, &pb.DrainCheckRequest{Node: "ghost"})
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

package drainserver

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/cozystack/cozy-health/aggregator/internal/delegated"
	"github.com/cozystack/cozy-health/aggregator/internal/drain"
	"github.com/cozystack/cozy-health/aggregator/internal/drain/draintest"
	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/pkg/report/reporttest"
	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
)

// t0 is when the fixtures' reports were sent (draintest.T0).
var t0 = draintest.T0

// blockedCluster: node-2's etcd member is Down, so draining node-1 is
// blocked; worker-1 is a Kubernetes Node whose agent never reported.
func blockedCluster() map[string]drain.NodeInfo {
	return draintest.EtcdCluster(3, map[string]drain.NodeInfo{
		"node-2":   draintest.Fresh("node-2", reporttest.EtcdMember(report.StatusDown, false), reporttest.EtcdMembership(3, 0)),
		"worker-1": draintest.Silent("worker-1"),
	})
}

func newTestService(t *testing.T, nodes map[string]drain.NodeInfo) (*Service, *prometheus.Registry, *clocktesting.FakeClock) {
	t.Helper()
	reg := prometheus.NewRegistry()
	clk := clocktesting.NewFakeClock(t0)
	svc, err := NewService(Config{}, func(time.Time) map[string]drain.NodeInfo { return nodes }, clk, nil, reg)
	require.NoError(t, err)
	return svc, reg, clk
}

// serveHTTP serves h on a loopback listener and returns its base URL.
func serveHTTP(t testing.TB, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle(Path, h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// serveGRPC serves svc's gRPC front end, authorized by auth, on a
// loopback listener and returns a client of it.
func serveGRPC(t *testing.T, svc *Service, auth *Authorizer) pb.DrainServiceClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	pb.RegisterDrainServiceServer(srv, NewGRPCServer(svc, auth))
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return pb.NewDrainServiceClient(conn)
}

// bearer is ctx carrying the gRPC metadata "authorization: Bearer token".
func bearer(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

func get(t *testing.T, url, token string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var body map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	return resp.StatusCode, body
}

func TestHTTPHandlerOverLoopback(t *testing.T) {
	svc, reg, _ := newTestService(t, blockedCluster())
	base := serveHTTP(t, NewHandler(svc, nil))

	code, body := get(t, base+Path+"?node=node-1", "")
	require.Equal(t, http.StatusOK, code, body)
	assert.Equal(t, "node-1", body["node"])
	assert.Equal(t, "blocked", body["verdict"])
	assert.Equal(t, t0.Format(time.RFC3339), body["evaluatedAt"])
	reasons := body["reasons"].([]any)
	first := reasons[0].(map[string]any)
	assert.Equal(t, "etcd-quorum", first["rule"])
	assert.Equal(t, "etcd", first["component"])
	assert.Equal(t, "blocked", first["verdict"])
	assert.Equal(t, "etcd: node-1 is a voting member; with node-2 Down (ServiceNotRunning), draining node-1 leaves 1 of 3 voting members healthy, quorum needs 2", first["message"])
	assert.Equal(t, 2.0, first["attributes"].(map[string]any)["quorum"])
	assert.Len(t, reasons, len(drain.Rules))

	code, body = get(t, base+Path+"?node=node-2", "")
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, "safe", body["verdict"])

	code, body = get(t, base+Path+"?node=worker-1", "")
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, "unknown", body["verdict"])
	assert.Contains(t, body["reasons"].([]any)[0].(map[string]any)["message"], "has no report from its cozy-health agent")

	code, body = get(t, base+Path, "")
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, body["error"], "invalid node name")
	code, _ = get(t, base+Path+"?node=Not_A_Node", "")
	assert.Equal(t, http.StatusBadRequest, code)
	code, body = get(t, base+Path+"?node=ghost", "")
	assert.Equal(t, http.StatusNotFound, code)
	assert.Contains(t, body["error"], "ghost is neither a Kubernetes Node nor reported by an agent")

	resp, err := http.Post(base+Path+"?node=node-1", "application/json", nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)

	// Every answer and every rejection is counted.
	assert.Equal(t, 1.0, testutil.ToFloat64(svc.m.checks.WithLabelValues("http", "blocked")))
	assert.Equal(t, 1.0, testutil.ToFloat64(svc.m.checks.WithLabelValues("http", "safe")))
	assert.Equal(t, 1.0, testutil.ToFloat64(svc.m.checks.WithLabelValues("http", "unknown")))
	assert.Equal(t, 2.0, testutil.ToFloat64(svc.m.rejected.WithLabelValues("http", "invalid_node")))
	assert.Equal(t, 1.0, testutil.ToFloat64(svc.m.rejected.WithLabelValues("http", "not_found")))
	assert.Equal(t, 1.0, testutil.ToFloat64(svc.m.rejected.WithLabelValues("http", "method")))
	n, err := testutil.GatherAndCount(reg, "cozy_health_drain_checks_total")
	require.NoError(t, err)
	assert.Equal(t, 3, n)
}

func TestGRPCServerOverLoopback(t *testing.T) {
	svc, _, _ := newTestService(t, blockedCluster())
	auth, _ := fakeAuthorizer(t)
	client := serveGRPC(t, svc, auth)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctx = bearer(ctx, goodToken)

	resp, err := client.DrainCheck(ctx, &pb.DrainCheckRequest{Node: "node-1"})
	require.NoError(t, err)
	assert.Equal(t, "node-1", resp.Node)
	assert.Equal(t, pb.Verdict_VERDICT_BLOCKED, resp.Verdict)
	assert.Equal(t, t0, resp.EvaluatedAt.AsTime())
	require.NotEmpty(t, resp.Reasons)
	assert.Equal(t, "etcd-quorum", resp.Reasons[0].Rule)
	assert.Equal(t, pb.Verdict_VERDICT_BLOCKED, resp.Reasons[0].Verdict)
	assert.Equal(t, 1.0, resp.Reasons[0].Attributes[drain.AttrHealthyAfterDrain])
	var nodeRef *pb.ResourceRef
	for _, r := range resp.Reasons {
		if r.Rule == drain.RuleTargetData {
			nodeRef = r.ResourceRef
		}
	}
	require.NotNil(t, nodeRef)
	assert.Equal(t, "Node", nodeRef.Kind)
	assert.Equal(t, "node-1", nodeRef.Name)

	resp, err = client.DrainCheck(ctx, &pb.DrainCheckRequest{Node: "worker-1"})
	require.NoError(t, err)
	assert.Equal(t, pb.Verdict_VERDICT_UNKNOWN, resp.Verdict)

	_, err = client.DrainCheck(ctx, &pb.DrainCheckRequest{})
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	_, err = client.DrainCheck(ctx, &pb.DrainCheckRequest{Node: "ghost"})
	assert.Equal(t, codes.NotFound, status.Code(err))
	assert.Equal(t, 1.0, testutil.ToFloat64(svc.m.rejected.WithLabelValues("grpc", "not_found")))
}

func TestServiceSnapshotCaching(t *testing.T) {
	nodes := blockedCluster()
	taken := 0
	clk := clocktesting.NewFakeClock(t0)
	svc, err := NewService(Config{MaxSnapshotAge: time.Second}, func(time.Time) map[string]drain.NodeInfo { taken++; return nodes }, clk, nil, nil)
	require.NoError(t, err)
	_, err = svc.Check("node-1", "test")
	require.NoError(t, err)
	_, err = svc.Check("node-3", "test")
	require.NoError(t, err)
	assert.Equal(t, 1, taken, "a second check within MaxSnapshotAge reuses the snapshot")
	clk.Step(1500 * time.Millisecond)
	_, err = svc.Check("node-1", "test")
	require.NoError(t, err)
	assert.Equal(t, 2, taken, "an older snapshot is retaken")

	_, err = NewService(Config{MaxSnapshotAge: -time.Second}, func(time.Time) map[string]drain.NodeInfo { return nil }, nil, nil, nil)
	assert.ErrorContains(t, err, "MaxSnapshotAge")
	_, err = NewService(Config{}, nil, nil, nil, nil)
	assert.Error(t, err)
}

func TestServiceDoesNotQueueBehindARebuild(t *testing.T) {
	nodes := blockedCluster()
	clk := clocktesting.NewFakeClock(t0)
	release := make(chan struct{})
	building := make(chan struct{}, 1)
	calls := 0
	svc, err := NewService(Config{MaxSnapshotAge: time.Second}, func(time.Time) map[string]drain.NodeInfo {
		calls++
		if calls > 1 {
			building <- struct{}{}
			<-release
		}
		return nodes
	}, clk, nil, nil)
	require.NoError(t, err)
	first := svc.Snapshot(clk.Now())
	clk.Step(2 * time.Second)
	go svc.Snapshot(clk.Now()) // a slow rebuild holds the lock
	<-building
	// A check meanwhile gets the 2s-old snapshot at once.
	got := make(chan *drain.Snapshot, 1)
	go func() { got <- svc.Snapshot(clk.Now()) }()
	select {
	case s := <-got:
		assert.Same(t, first, s)
	case <-time.After(10 * time.Second):
		t.Fatal("check waited for the rebuild")
	}
	close(release)
}

// goodToken and otherToken are shaped like ServiceAccount tokens (the
// Authorizer refuses anything else without a review).
var goodToken, otherToken = jwtFor("good"), jwtFor("other")

func jwtFor(sub string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(`{"sub":"`+sub+`","exp":4102444800}`)) + ".c2ln"
}

// fakeAuthorizer is a delegated Authorizer on a clientset whose TokenReview
// authenticates "good" and "other" and whose SubjectAccessReview allows
// only the user of "good"; it counts the reviews asked.
func fakeAuthorizer(t testing.TB) (*Authorizer, *atomic.Int64) {
	t.Helper()
	var reviews atomic.Int64
	cs := fake.NewClientset()
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, kruntime.Object, error) {
		reviews.Add(1)
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		switch tr.Spec.Token {
		case goodToken:
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "upgrader"}}
		case otherToken:
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "nobody"}}
		default:
			tr.Status = authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}
		}
		return true, tr, nil
	})
	cs.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, kruntime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
		sar.Status.Allowed = sar.Spec.User == "upgrader" && sar.Spec.NonResourceAttributes != nil && sar.Spec.NonResourceAttributes.Path == Path
		return true, sar, nil
	})
	return NewAuthorizerFrom(delegated.New(cs, time.Minute)), &reviews
}

// TestGRPCDrainNeverAnswersAnonymously: the gRPC drain check is on the
// ingest port, which the node network reaches; it answers only callers
// whose token passes the delegated review, whatever --drain-auth says for
// HTTP. Before, it answered anyone (drain-auth none) with the verdict.
func TestGRPCDrainNeverAnswersAnonymously(t *testing.T) {
	svc, _, _ := newTestService(t, blockedCluster())
	auth, _ := fakeAuthorizer(t)
	for name, a := range map[string]*Authorizer{"with authorizer": auth, "without": nil} {
		t.Run(name, func(t *testing.T) {
			client := serveGRPC(t, svc, a)
			ctx := context.Background()
			_, err := client.DrainCheck(ctx, &pb.DrainCheckRequest{Node: "node-1"})
			assert.Equal(t, codes.Unauthenticated, status.Code(err))
			_, err = client.DrainCheck(bearer(ctx, jwtFor("junk")), &pb.DrainCheckRequest{Node: "node-1"})
			assert.Equal(t, codes.Unauthenticated, status.Code(err))
			if a == nil {
				return
			}
			_, err = client.DrainCheck(bearer(ctx, otherToken), &pb.DrainCheckRequest{Node: "node-1"})
			assert.Equal(t, codes.PermissionDenied, status.Code(err))
			resp, err := client.DrainCheck(bearer(ctx, goodToken), &pb.DrainCheckRequest{Node: "node-1"})
			require.NoError(t, err)
			assert.Equal(t, pb.Verdict_VERDICT_BLOCKED, resp.Verdict)
		})
	}
}

// TestRejectionLogsAreSampled: 1,000 refused drain checks in a burst are
// all counted, but logged only a few times. Before, each was a log line.
func TestRejectionLogsAreSampled(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	svc, err := NewService(Config{}, func(time.Time) map[string]drain.NodeInfo { return blockedCluster() }, clocktesting.NewFakeClock(t0), zap.New(core), nil)
	require.NoError(t, err)
	for range 1000 {
		_, err := svc.Check("Not_A_Node", "http")
		require.ErrorIs(t, err, errInvalidNode)
	}
	assert.Equal(t, 1000.0, testutil.ToFloat64(svc.m.rejected.WithLabelValues("http", "invalid_node")))
	assert.LessOrEqual(t, logs.FilterMessage("drain check rejected").Len(), rejectLogFirst+1000/rejectLogThereafter)
}

// TestJunkTokensCostBoundedReviews: the delegated reviews of tokens not in
// the cache spend a budget; past it, callers get 429 / ResourceExhausted
// and the apiserver is not asked.
func TestJunkTokensCostBoundedReviews(t *testing.T) {
	svc, _, _ := newTestService(t, blockedCluster())
	auth, reviews := fakeAuthorizer(t)
	auth.d.SetRate(1, 10)
	base := serveHTTP(t, NewHandler(svc, auth))
	codes := map[int]int{}
	for i := range 200 {
		code, _ := get(t, base+Path+"?node=node-1", jwtFor(fmt.Sprintf("junk-%d", i)))
		codes[code]++
	}
	assert.LessOrEqual(t, reviews.Load(), int64(12), "TokenReviews for 200 junk tokens")
	assert.Positive(t, codes[http.StatusTooManyRequests])
	assert.Equal(t, 200, codes[http.StatusUnauthorized]+codes[http.StatusTooManyRequests])
}

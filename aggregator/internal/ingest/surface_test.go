package ingest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cozystack/cozy-health/pkg/metrictest"
	"github.com/cozystack/cozy-health/pkg/signing"
	"github.com/cozystack/cozy-health/pkg/tlsutil"
	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
)

// fakeJWT is shaped like a kubelet's projected token (header.claims.sig)
// for aud, expiring at exp; only the apiserver's TokenReview can tell
// whether it is real.
func fakeJWT(t testing.TB, aud string, exp time.Time, salt string) string {
	t.Helper()
	claims, err := json.Marshal(map[string]any{"aud": []string{aud}, "exp": exp.Unix(), "jti": salt})
	require.NoError(t, err)
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256","kid":"k"}`)) + "." + enc(claims) + "." + enc([]byte("sig-"+salt))
}

// reviewer answers TokenReviews like the apiserver would for the agent
// ServiceAccount's pod-bound tokens: a token in good is authenticated for
// its node, everything else is not. It counts the reviews it was asked.
type reviewer struct {
	calls atomic.Int64
	mu    sync.Mutex
	good  map[string]string // token -> node
}

func (r *reviewer) set(token, node string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if node == "" {
		delete(r.good, token)
		return
	}
	r.good[token] = node
}

func (r *reviewer) client() *fake.Clientset {
	cs := fake.NewClientset()
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, kruntime.Object, error) {
		r.calls.Add(1)
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		r.mu.Lock()
		node, ok := r.good[tr.Spec.Token]
		r.mu.Unlock()
		if !ok {
			tr.Status = authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}
			return true, tr, nil
		}
		tr.Status = authenticationv1.TokenReviewStatus{
			Authenticated: true, Audiences: tr.Spec.Audiences,
			User: authenticationv1.UserInfo{Username: "system:serviceaccount:cozy-health:cozy-health-agent",
				Extra: map[string]authenticationv1.ExtraValue{NodeNameExtraKey: {node}}},
		}
		return true, tr, nil
	})
	return cs
}

func newReviewer() *reviewer { return &reviewer{good: map[string]string{}} }

// conn dials ts once; streams opened on it share the connection.
func conn(t testing.TB, ts *testServer) *grpc.ClientConn {
	t.Helper()
	tc, err := tlsutil.ClientConfig(ts.files.CAFile, "127.0.0.1")
	require.NoError(t, err)
	c, err := grpc.NewClient("passthrough:///"+ts.addr, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// hello opens a stream on c and says hello with token; it returns the
// stream, the hello's ack and the stream's error after a rejection.
func hello(t testing.TB, c *grpc.ClientConn, signer *signing.Signer, node, token string) (pb.IngestService_IngestClient, context.CancelFunc, *pb.Ack, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := pb.NewIngestServiceClient(c).Ingest(ctx)
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	if err := st.Send(&pb.IngestRequest{Msg: &pb.IngestRequest_Hello{Hello: &pb.Hello{
		Token: token, PublicKey: signer.PublicKey(), KeyId: signer.KeyID(), AgentInstanceId: "i-" + token[len(token)-6:], NodeName: node, AgentVersion: "test",
	}}}); err != nil {
		return st, cancel, nil, err
	}
	resp, err := st.Recv()
	if err != nil {
		return st, cancel, nil, err
	}
	if !resp.GetAck().GetAccepted() {
		_, err = st.Recv()
	}
	return st, cancel, resp.GetAck(), err
}

// TestPendingStreamsOfOnePeerAreBounded: 3,000 streams on one connection
// that never say hello. Before, each held a handler (and a receiving
// goroutine) for the whole hello timeout; now the connection carries at most
// MaxConcurrentStreams and at most MaxPendingPerPeer of them wait for a
// hello, the others are refused at once.
func TestPendingStreamsOfOnePeerAreBounded(t *testing.T) {
	rv := newReviewer()
	ts := startServer(t, Config{HelloTimeout: 3 * time.Second, Surface: SurfaceLimits{LimitLoopback: true}}, Deps{TokenReviews: rv.client().AuthenticationV1().TokenReviews()})
	c := conn(t, ts)
	base := runtime.NumGoroutine()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var peak atomic.Int64
	var wg sync.WaitGroup
	for range 3000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := pb.NewIngestServiceClient(c).Ingest(ctx)
			if err == nil {
				_, _ = st.Recv()
			}
		}()
	}
	// Sample the server's pending gauge while the flood is on.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	sample := time.NewTicker(20 * time.Millisecond)
	defer sample.Stop()
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case <-sample.C:
			if v := int64(metrictest.Value(t, ts.reg, "cozy_health_ingest_pending_streams")); v > peak.Load() {
				peak.Store(v)
			}
		}
	}
	assert.LessOrEqual(t, peak.Load(), int64(DefaultMaxPendingPerPeer), "pending streams of one peer")
	assert.Positive(t, rejected(t, ts, ReasonTooManyStreams), "refused streams are counted")
	assert.Zero(t, rv.calls.Load(), "streams without a hello cost no TokenReview")
	// Nothing is left behind on the server once the client is gone.
	require.Eventually(t, func() bool { return runtime.NumGoroutine() < base+50 }, 10*time.Second, 50*time.Millisecond)
}

// TestJunkTokensAreNotEachReviewed: 200 junk tokens from one peer. Before,
// 200 TokenReviews on the client leader election shares; now tokens not
// shaped like ours cost none and well-shaped junk spends only the peer's
// small budget, refused beyond it with review_throttled.
func TestJunkTokensAreNotEachReviewed(t *testing.T) {
	rv := newReviewer()
	ts := startServer(t, Config{Surface: SurfaceLimits{LimitLoopback: true}}, Deps{TokenReviews: rv.client().AuthenticationV1().TokenReviews()})
	c := conn(t, ts)
	key, err := signing.Generate()
	require.NoError(t, err)
	for i := range 200 {
		tok := fakeJWT(t, DefaultTokenAudience, time.Now().Add(time.Hour), fmt.Sprintf("junk%04d", i))
		if i%2 == 0 {
			tok = fmt.Sprintf("not-a-jwt-%06d", i)
		}
		_, cancel, ack, err := hello(t, c, key, "cp1", tok)
		if cancel != nil {
			cancel()
		}
		require.NotNil(t, ack, "hello %d: %v", i, err)
		assert.False(t, ack.GetAccepted())
	}
	assert.LessOrEqual(t, rv.calls.Load(), int64(DefaultPeerTokenReviewBurst+1), "TokenReviews for 200 junk tokens")
	assert.Positive(t, rejected(t, ts, ReasonReviewThrottled))
	assert.Equal(t, 100.0, metrictest.Value(t, ts.reg, "cozy_health_ingest_token_reviews_total", "result", "malformed"))
}

// TestOneStreamPerNode: 500 streams from one node's token. Before, all 500
// stayed authenticated; now a newer stream replaces the older one (whose
// connection is closed), so the node holds one, and it is the newest.
func TestOneStreamPerNode(t *testing.T) {
	rv := newReviewer()
	ts := startServer(t, Config{Surface: SurfaceLimits{LimitLoopback: true}}, Deps{TokenReviews: rv.client().AuthenticationV1().TokenReviews()})
	tok := fakeJWT(t, DefaultTokenAudience, time.Now().Add(time.Hour), "cp1")
	rv.set(tok, "cp1")
	key, err := signing.Generate()
	require.NoError(t, err)
	var last *testAgent
	var prev *grpc.ClientConn
	for i := range 500 {
		c := conn(t, ts)
		st, cancel, ack, err := hello(t, c, key, "cp1", tok)
		require.NoError(t, err, "stream %d", i)
		require.True(t, ack.GetAccepted(), "stream %d: %s", i, ack.GetRejectReason())
		last = &testAgent{t: t, signer: key, node: "cp1", instance: "i-" + tok[len(tok)-6:], stream: st, cancel: cancel, seq: uint64(i) * 1000}
		if prev != nil {
			_ = prev.Close()
		}
		prev = c
	}
	// A replaced stream's handler ends (and leaves the gauge) when its
	// connection's close reaches it, just after the newer hello's ack.
	require.Eventually(t, func() bool { return metrictest.Value(t, ts.reg, "cozy_health_ingest_streams") == 1 }, 5*time.Second, 10*time.Millisecond,
		"authenticated streams of one node: %v", metrictest.Value(t, ts.reg, "cozy_health_ingest_streams"))
	assert.Equal(t, 499.0, metrictest.Value(t, ts.reg, "cozy_health_ingest_streams_replaced_total"))
	assert.True(t, last.send(last.next(nil)).GetAccepted(), "the newest stream carries reports")

	t.Run("a second stream on the same connection is refused", func(t *testing.T) {
		c := conn(t, ts)
		_, cancel1, ack, err := hello(t, c, key, "cp1", tok)
		require.NoError(t, err)
		defer cancel1()
		require.True(t, ack.GetAccepted())
		_, cancel2, ack, err := hello(t, c, key, "cp1", tok)
		defer cancel2()
		assert.Equal(t, ReasonTooManyStreams, ack.GetRejectReason())
		assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	})
}

// TestConnectionsPerPeerAreBounded: connections past MaxConnsPerPeer from
// one address are closed at accept.
func TestConnectionsPerPeerAreBounded(t *testing.T) {
	rv := newReviewer()
	ts := startServer(t, Config{Surface: SurfaceLimits{MaxConnsPerPeer: 3, LimitLoopback: true}}, Deps{TokenReviews: rv.client().AuthenticationV1().TokenReviews()})
	key, err := signing.Generate()
	require.NoError(t, err)
	var failed int
	for i := range 6 {
		tok := fakeJWT(t, DefaultTokenAudience, time.Now().Add(time.Hour), fmt.Sprintf("node%02d", i))
		rv.set(tok, fmt.Sprintf("n%d", i))
		_, _, ack, err := hello(t, conn(t, ts), key, fmt.Sprintf("n%d", i), tok)
		if err != nil || !ack.GetAccepted() {
			failed++
		}
	}
	assert.Equal(t, 3, failed)
	assert.Equal(t, 3.0, rejected(t, ts, ReasonTooManyStreams))
}

// TestStreamsAreReauthenticated: a stream whose token stops passing the
// review (its pod was deleted) is closed at the next re-review, and one
// whose token expires is closed at its expiry. Before, both lived until the
// connection's maximum age (30 min).
func TestStreamsAreReauthenticated(t *testing.T) {
	rv := newReviewer()
	ts := startServer(t, Config{TokenReviewCacheTTL: time.Millisecond, Surface: SurfaceLimits{ReauthPeriod: 300 * time.Millisecond}},
		Deps{TokenReviews: rv.client().AuthenticationV1().TokenReviews()})
	key, err := signing.Generate()
	require.NoError(t, err)

	t.Run("pod deleted", func(t *testing.T) {
		tok := fakeJWT(t, DefaultTokenAudience, time.Now().Add(time.Hour), "podgone")
		rv.set(tok, "cp1")
		st, cancel, ack, err := hello(t, conn(t, ts), key, "cp1", tok)
		require.NoError(t, err)
		defer cancel()
		require.True(t, ack.GetAccepted())
		// Still there after a few re-reviews.
		time.Sleep(time.Second)
		require.Equal(t, 1.0, metrictest.Value(t, ts.reg, "cozy_health_ingest_streams"))
		rv.set(tok, "") // the pod is gone: its token no longer authenticates
		_, err = st.Recv()
		require.Error(t, err)
		assert.Equal(t, 1.0, rejected(t, ts, ReasonRevoked))
	})
	t.Run("token expires", func(t *testing.T) {
		tok := fakeJWT(t, DefaultTokenAudience, time.Now().Add(2*time.Second), "expire")
		rv.set(tok, "cp2")
		// A long re-review period: only the expiry ends it.
		ts := startServer(t, Config{Surface: SurfaceLimits{ReauthPeriod: time.Hour}}, Deps{TokenReviews: rv.client().AuthenticationV1().TokenReviews()})
		st, cancel, ack, err := hello(t, conn(t, ts), key, "cp2", tok)
		require.NoError(t, err)
		defer cancel()
		require.True(t, ack.GetAccepted())
		_, err = st.Recv()
		require.Error(t, err)
		assert.Equal(t, 1.0, rejected(t, ts, ReasonRevoked))
	})
}

// TestLoopbackIsSparedPerPeerBounds: the lab and the benchmarks run every
// simulated node on loopback; the per-peer bounds do not apply there (no
// agent in a cluster connects from the aggregator's own loopback).
func TestLoopbackIsSparedPerPeerBounds(t *testing.T) {
	rv := newReviewer()
	ts := startServer(t, Config{Surface: SurfaceLimits{MaxConnsPerPeer: 2}}, Deps{TokenReviews: rv.client().AuthenticationV1().TokenReviews()})
	key, err := signing.Generate()
	require.NoError(t, err)
	for i := range 10 {
		tok := fakeJWT(t, DefaultTokenAudience, time.Now().Add(time.Hour), fmt.Sprintf("lab%03d", i))
		rv.set(tok, fmt.Sprintf("n%d", i))
		_, _, ack, err := hello(t, conn(t, ts), key, fmt.Sprintf("n%d", i), tok)
		require.NoError(t, err)
		require.True(t, ack.GetAccepted(), "node %d: %s", i, ack.GetRejectReason())
	}
	assert.Equal(t, 10.0, metrictest.Value(t, ts.reg, "cozy_health_ingest_streams"))
}

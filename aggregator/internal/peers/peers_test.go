package peers

import (
	"context"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	authenticationv1 "k8s.io/api/authentication/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cozystack/cozy-health/aggregator/internal/ingest"
	"github.com/cozystack/cozy-health/aggregator/internal/state"
	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/pkg/signing"
	"github.com/cozystack/cozy-health/pkg/tlsutil"
	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
)

const (
	aggregatorSA = "cozy-health/cozy-health-aggregator"
	audience     = "health.cozystack.io"
)

// fakeSource is a replica's ingest memory: Latest per node, and the agent
// tokens its TokenReview binds to a node.
type fakeSource struct {
	mu      sync.Mutex
	latest  map[string]ingest.Latest
	tokens  map[string]string // agent token -> node
	reviews int
}

func newSource() *fakeSource {
	return &fakeSource{latest: map[string]ingest.Latest{}, tokens: map[string]string{}}
}

func (f *fakeSource) Latest(node string) (ingest.Latest, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.latest[node]
	return l, ok
}

func (f *fakeSource) ReviewAgentToken(_ context.Context, token, _ string) (string, string, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reviews++
	if n, ok := f.tokens[token]; ok {
		return n, "", "", nil
	}
	return "", "unauthenticated", "invalid bearer token", nil
}

// agent signs reports of one node.
type agent struct {
	t        *testing.T
	signer   *signing.Signer
	node     string
	instance string
	seq      uint64
}

func newAgent(t *testing.T, node string) *agent {
	s, err := signing.Generate()
	require.NoError(t, err)
	return &agent{t: t, signer: s, node: node, instance: "inst-" + node}
}

func (a *agent) report(sentAt time.Time) (*report.NodeReport, *pb.SignedReport) {
	a.seq++
	r := &report.NodeReport{NodeName: a.node, AgentInstanceID: a.instance, Sequence: a.seq, SentAt: sentAt, Interval: 5 * time.Second, AgentVersion: "test",
		Observations: []report.Observation{{Component: report.ComponentNode, Check: "heartbeat", Status: report.StatusHealthy, Reason: "Ok",
			ResourceRef: &report.ResourceRef{Kind: report.KindNode, Name: a.node}}}}
	sr, err := a.signer.SignReport(r)
	require.NoError(a.t, err)
	return r, sr
}

// latest is what a replica that heard the agent holds.
func (a *agent) latest(sr *pb.SignedReport, token string, at time.Time) ingest.Latest {
	return ingest.Latest{Node: a.node, Instance: a.instance, KeyID: a.signer.KeyID(), PublicKey: a.signer.PublicKey(), Token: token,
		Report: sr, Sequence: a.seq, ReceivedAt: at}
}

// reviewer answers TokenReviews of callers: token -> username.
func reviewer(users map[string]string) *fake.Clientset {
	cs := fake.NewClientset()
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, kruntime.Object, error) {
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		u, ok := users[tr.Spec.Token]
		if !ok {
			tr.Status = authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}
			return true, tr, nil
		}
		tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: tr.Spec.Audiences, User: authenticationv1.UserInfo{Username: u}}
		return true, tr, nil
	})
	return cs
}

// fixture is a peer replica ("aggregator-1", serving PeerService from its
// source) and an asking replica ("aggregator-0", with its own state,
// source and sync loop).
type fixture struct {
	t        *testing.T
	now      time.Time
	peerSrc  *fakeSource
	ownSrc   *fakeSource
	st       *state.State
	srvM     *Metrics
	syncM    *Metrics
	sync     *Syncer
	tokenDir string
}

func newFixture(t *testing.T, callerToken string) *fixture {
	f := &fixture{t: t, now: time.Now(), peerSrc: newSource(), ownSrc: newSource(), st: state.New(nil)}
	files, err := tlsutil.WriteServing(t.TempDir(), "127.0.0.1")
	require.NoError(t, err)
	f.srvM, err = NewMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	f.syncM, err = NewMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	cs := reviewer(map[string]string{
		"own-sa-token":   "system:serviceaccount:cozy-health:cozy-health-aggregator",
		"agent-sa-token": "system:serviceaccount:cozy-health:cozy-health-agent",
	})
	srv, err := NewServer(ServerConfig{Identity: "aggregator-1", Audience: audience, ServiceAccount: aggregatorSA, MaxAge: time.Minute},
		f.peerSrc, cs.AuthenticationV1().TokenReviews(), f.srvM, zap.NewNop(), func() time.Time { return f.now })
	require.NoError(t, err)
	tc, err := tlsutil.ServerConfig(files.CertFile, files.KeyFile)
	require.NoError(t, err)
	g := grpc.NewServer(grpc.Creds(credentials.NewTLS(tc)))
	srv.Register(g)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)

	f.tokenDir = t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(f.tokenDir, "token"), []byte(callerToken+"\n"), 0o600))
	pool, err := tlsutil.LoadCAPool(files.CAFile)
	require.NoError(t, err)
	f.sync = NewSyncer(SyncConfig{
		Identity: "aggregator-0", Peers: []string{ln.Addr().String()}, Interval: 5 * time.Second, SkewWindow: time.Minute,
		MaxPayloadBytes: report.MaxReportBytes, TokenFile: filepath.Join(f.tokenDir, "token"),
		CAPool: func() (*x509.CertPool, error) { return pool, nil },
	}, f.ownSrc, f.st, f.syncM, zap.NewNop(), func() time.Time { return f.now })
	t.Cleanup(f.sync.closeConns)
	return f
}

func (f *fixture) rejected(m *Metrics, reason string) float64 {
	return testutil.ToFloat64(m.Rejected.WithLabelValues(reason))
}

// TestRelayedReportAccepted: a node this replica heard before (its own
// ingest holds the agent's key) and no longer hears is held through the
// peer that does: the agent's own report, stored with Via naming the peer,
// received at its own sent-at; the unheard gauge reads 1. Heard directly
// again, the same report flips Via back, and the gauge to 0.
func TestRelayedReportAccepted(t *testing.T) {
	f := newFixture(t, "own-sa-token")
	a := newAgent(t, "n1")
	r1, sr1 := a.report(f.now.Add(-20 * time.Second))
	f.st.AcceptVia(r1, r1.SentAt, "")
	f.ownSrc.latest["n1"] = a.latest(sr1, "", r1.SentAt)

	r2, sr2 := a.report(f.now.Add(-2 * time.Second))
	f.peerSrc.latest["n1"] = a.latest(sr2, "agent-token-n1", f.now.Add(-time.Second))
	f.sync.Round(context.Background())

	e, ok := f.st.Get("n1")
	require.True(t, ok)
	assert.Equal(t, "aggregator-1", e.Via)
	assert.Equal(t, uint64(2), e.Report.Sequence)
	assert.Equal(t, r2.SentAt.UnixNano(), e.ReceivedAt.UnixNano(), "received at the report's own sent-at")
	assert.Equal(t, 1.0, testutil.ToFloat64(f.syncM.Unheard.WithLabelValues("aggregator-0")))
	assert.Equal(t, 1.0, testutil.ToFloat64(f.syncM.Accepted))
	assert.Zero(t, f.ownSrc.reviews, "a key this replica authenticated itself needs no review")

	f.sync.Round(context.Background())
	assert.Equal(t, 1.0, testutil.ToFloat64(f.syncM.Accepted), "the same report is not stored twice")
	for _, reason := range Reasons {
		assert.Zero(t, f.rejected(f.syncM, reason), reason)
	}

	// Heard directly again (ingest's sink): direct beats relayed.
	f.st.AcceptVia(r2, f.now, "")
	e, _ = f.st.Get("n1")
	assert.Empty(t, e.Via)
	f.sync.Round(context.Background())
	assert.Zero(t, testutil.ToFloat64(f.syncM.Unheard.WithLabelValues("aggregator-0")))
}

// TestRelayedBadSignatureRejected: a report whose bytes were changed after
// signing is refused and counted (bad_signature), never stored.
func TestRelayedBadSignatureRejected(t *testing.T) {
	f := newFixture(t, "own-sa-token")
	a := newAgent(t, "n1")
	f.st.Expect("n1", f.now.Add(-time.Minute))
	_, sr := a.report(f.now)
	f.ownSrc.latest["n1"] = a.latest(nil, "", time.Time{})
	tampered := &pb.SignedReport{Payload: append([]byte(nil), sr.GetPayload()...), KeyId: sr.GetKeyId(), Signature: sr.GetSignature()}
	tampered.Payload[len(tampered.Payload)-3] ^= 0x01
	f.peerSrc.latest["n1"] = a.latest(tampered, "", f.now)
	f.sync.Round(context.Background())
	assert.Equal(t, 1.0, f.rejected(f.syncM, ReasonBadSignature))
	e, _ := f.st.Get("n1")
	assert.Nil(t, e.Report)
}

// TestRelayedKeyNeedsOwnVouching: a key this replica never authenticated
// is refused without a token (unknown_key), refused with a token its own
// TokenReview does not bind to the node, and accepted after its own
// review of a good one.
func TestRelayedKeyNeedsOwnVouching(t *testing.T) {
	f := newFixture(t, "own-sa-token")
	a := newAgent(t, "n1")
	f.st.Expect("n1", f.now.Add(-time.Minute))
	_, sr := a.report(f.now)
	f.peerSrc.latest["n1"] = a.latest(sr, "", f.now)
	f.sync.Round(context.Background())
	assert.Equal(t, 1.0, f.rejected(f.syncM, ReasonUnknownKey))

	f.ownSrc.tokens["token-of-n2"] = "n2"
	f.peerSrc.latest["n1"] = a.latest(sr, "token-of-n2", f.now)
	f.sync.Round(context.Background())
	assert.Equal(t, 1.0, f.rejected(f.syncM, ReasonNodeMismatch), "a token bound to another node does not vouch")

	f.ownSrc.tokens["token-of-n1"] = "n1"
	f.peerSrc.latest["n1"] = a.latest(sr, "token-of-n1", f.now)
	f.sync.Round(context.Background())
	e, _ := f.st.Get("n1")
	require.NotNil(t, e.Report)
	assert.Equal(t, "aggregator-1", e.Via)
}

// TestRelayedStaleRefused: a report older than the held one is not
// accepted (replay), and one sent outside the skew window is refused
// (skew).
func TestRelayedStaleRefused(t *testing.T) {
	f := newFixture(t, "own-sa-token")
	a := newAgent(t, "n1")
	r1, sr1 := a.report(f.now.Add(-30 * time.Second))
	_, sr2 := a.report(f.now.Add(-25 * time.Second))
	// This replica holds sequence 2 (heard directly, long ago enough to ask).
	r2 := *r1
	r2.Sequence = 2
	f.st.AcceptVia(&r2, f.now.Add(-25*time.Second), "")
	f.ownSrc.latest["n1"] = a.latest(sr2, "", f.now)
	a.seq = 1
	f.peerSrc.latest["n1"] = a.latest(sr1, "", f.now) // the peer's is older
	// The server filters by what is held; a lying or lagging peer's older
	// answer is refused here too.
	f.peerSrc.latest["n1"] = ingest.Latest{Node: "n1", Instance: a.instance, KeyID: a.signer.KeyID(), PublicKey: a.signer.PublicKey(),
		Report: sr1, Sequence: 3, ReceivedAt: f.now}
	f.sync.Round(context.Background())
	assert.Equal(t, 1.0, f.rejected(f.syncM, ReasonReplay))
	e, _ := f.st.Get("n1")
	assert.Equal(t, uint64(2), e.Report.Sequence)

	a.seq = 5
	_, old := a.report(f.now.Add(-2 * time.Minute))
	f.peerSrc.latest["n1"] = a.latest(old, "", f.now)
	f.sync.Round(context.Background())
	assert.Equal(t, 1.0, f.rejected(f.syncM, ReasonSkew))
	e, _ = f.st.Get("n1")
	assert.Equal(t, uint64(2), e.Report.Sequence)
}

// TestPeerCallerMustBeTheAggregator: a caller whose token is not the
// aggregator's ServiceAccount (an agent's) is refused and counted
// (wrong_service_account); no token at all, unauthenticated.
func TestPeerCallerMustBeTheAggregator(t *testing.T) {
	f := newFixture(t, "agent-sa-token")
	a := newAgent(t, "n1")
	f.st.Expect("n1", f.now.Add(-time.Minute))
	_, sr := a.report(f.now)
	f.ownSrc.latest["n1"] = a.latest(nil, "", time.Time{})
	f.peerSrc.latest["n1"] = a.latest(sr, "", f.now)
	f.sync.Round(context.Background())
	assert.Equal(t, 1.0, f.rejected(f.srvM, ReasonWrongServiceAccount))
	assert.Equal(t, 1.0, testutil.ToFloat64(f.syncM.Calls.WithLabelValues("error")))
	e, _ := f.st.Get("n1")
	assert.Nil(t, e.Report)

	require.NoError(t, os.WriteFile(filepath.Join(f.tokenDir, "token"), []byte("forged"), 0o600))
	f.sync.Round(context.Background())
	assert.Equal(t, 1.0, f.rejected(f.srvM, ReasonUnauthenticated))
}

// TestSelfSkipped: this replica's own address among --peers answers with
// its identity and is not asked again.
func TestSelfSkipped(t *testing.T) {
	f := newFixture(t, "own-sa-token")
	f.sync.cfg.Identity = "aggregator-1"
	f.st.Expect("n1", f.now.Add(-time.Minute))
	f.sync.Round(context.Background())
	f.sync.Round(context.Background())
	assert.Equal(t, 1.0, testutil.ToFloat64(f.syncM.Calls.WithLabelValues("self")))
}

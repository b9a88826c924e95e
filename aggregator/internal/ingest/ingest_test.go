package ingest

import (
	"crypto/rand"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/cozystack/cozy-health/pkg/metrictest"
	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/pkg/signing"
	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
)

// devKeys writes a dev key pair per node and returns the dir and signers.
func devKeys(t *testing.T, nodes ...string) (string, map[string]*signing.Signer) {
	t.Helper()
	dir := t.TempDir()
	out := map[string]*signing.Signer{}
	for _, n := range nodes {
		p, err := signing.WriteDevKeyPair(dir, n)
		require.NoError(t, err)
		out[n], err = signing.LoadKeyFile(p)
		require.NoError(t, err)
	}
	return dir, out
}

// healthyAgent sends a report every period until stop is closed and
// records every ack; all must be accepted.
type healthyAgent struct {
	sent, accepted atomic.Int64
	// maxRTT is the slowest send->ack in nanoseconds.
	maxRTT atomic.Int64
	bad    atomic.Value // string: the first rejection
	done   chan struct{}
}

func runHealthy(t *testing.T, a *testAgent, period time.Duration, stop <-chan struct{}) *healthyAgent {
	h := &healthyAgent{done: make(chan struct{})}
	go func() {
		defer close(h.done)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			sr := a.next(nil)
			start := time.Now()
			if err := a.stream.Send(&pb.IngestRequest{Msg: &pb.IngestRequest_Report{Report: sr}}); err != nil {
				h.bad.CompareAndSwap(nil, "send: "+err.Error())
				return
			}
			h.sent.Add(1)
			resp, err := a.stream.Recv()
			if err != nil {
				h.bad.CompareAndSwap(nil, "recv: "+err.Error())
				return
			}
			if rtt := int64(time.Since(start)); rtt > h.maxRTT.Load() {
				h.maxRTT.Store(rtt)
			}
			if !resp.GetAck().GetAccepted() {
				h.bad.CompareAndSwap(nil, "rejected: "+resp.GetAck().GetRejectReason())
				continue
			}
			h.accepted.Add(1)
		}
	}()
	return h
}

func TestEveryBadReportIsRejectedAndCountedWhileAHealthyAgentFlows(t *testing.T) {
	dir, keys := devKeys(t, "cp1", "cp2", "cp3")
	intruder, err := signing.Generate()
	require.NoError(t, err)
	const maxPayload = 8 << 10
	ts := startServer(t, Config{InsecureDevKeysDir: dir, MaxPayloadBytes: maxPayload, SkewWindow: 30 * time.Second, RatePerNode: 20, RateBurst: 40}, Deps{})

	healthy, ack, err := connect(t, ts, keys["cp1"], "cp1", "")
	require.NoError(t, err)
	require.True(t, ack.GetAccepted())
	stop := make(chan struct{})
	h := runHealthy(t, healthy, 20*time.Millisecond, stop)

	bad, ack, err := connect(t, ts, keys["cp2"], "cp2", "")
	require.NoError(t, err)
	require.True(t, ack.GetAccepted())
	require.True(t, bad.send(bad.next(nil)).GetAccepted(), "a good report on the same stream first")
	garbage := make([]byte, 300)
	_, _ = rand.Read(garbage)

	cases := []struct {
		name   string
		reason string
		report func() *pb.SignedReport
	}{
		{"tampered payload", ReasonBadSignature, func() *pb.SignedReport {
			sr := bad.next(nil)
			sr.Payload[len(sr.Payload)/2] ^= 0x20
			return sr
		}},
		{"signature of another payload", ReasonBadSignature, func() *pb.SignedReport {
			sr, other := bad.next(nil), bad.next(nil)
			sr.Signature = other.Signature
			return sr
		}},
		{"truncated signature", ReasonBadSignature, func() *pb.SignedReport {
			sr := bad.next(nil)
			sr.Signature = sr.Signature[:40]
			return sr
		}},
		{"signed by another key claiming the stream's key id", ReasonBadSignature, func() *pb.SignedReport {
			sr, err := intruder.SignReport(sampleReport("cp2", bad.instance, bad.seq+1, time.Now(), 20))
			require.NoError(t, err)
			sr.KeyId = keys["cp2"].KeyID()
			return sr
		}},
		{"missing signature", ReasonMissingSignature, func() *pb.SignedReport {
			sr := bad.next(nil)
			sr.Signature = nil
			return sr
		}},
		{"another key's id", ReasonUnknownKey, func() *pb.SignedReport {
			sr, err := intruder.SignReport(sampleReport("cp2", bad.instance, bad.seq+1, time.Now(), 20))
			require.NoError(t, err)
			return sr
		}},
		{"report for another node", ReasonNodeMismatch, func() *pb.SignedReport {
			return bad.next(func(r *report.NodeReport) { r.NodeName = "cp1" })
		}},
		{"replayed sequence", ReasonReplay, func() *pb.SignedReport {
			sr := bad.next(nil)
			require.True(t, bad.send(sr).GetAccepted())
			return sr
		}},
		{"older sequence", ReasonReplay, func() *pb.SignedReport {
			return bad.next(func(r *report.NodeReport) { r.Sequence -= 2 })
		}},
		{"stale sent-at", ReasonSkew, func() *pb.SignedReport {
			return bad.next(func(r *report.NodeReport) { r.SentAt = time.Now().Add(-time.Minute) })
		}},
		{"sent-at in the future", ReasonSkew, func() *pb.SignedReport {
			return bad.next(func(r *report.NodeReport) { r.SentAt = time.Now().Add(time.Minute) })
		}},
		{"oversized payload", ReasonOversized, func() *pb.SignedReport {
			return bad.next(func(r *report.NodeReport) { r.Observations[0].Message = strings.Repeat("x", maxPayload) })
		}},
		{"garbage bytes, signed", ReasonMalformed, func() *pb.SignedReport {
			return &pb.SignedReport{Payload: garbage, KeyId: keys["cp2"].KeyID(), Signature: keys["cp2"].Sign(garbage)}
		}},
		{"garbage bytes, garbage signature", ReasonBadSignature, func() *pb.SignedReport {
			return &pb.SignedReport{Payload: garbage, KeyId: keys["cp2"].KeyID(), Signature: garbage[:64]}
		}},
		{"valid protobuf without sent-at", ReasonMalformed, func() *pb.SignedReport {
			sr := bad.next(nil)
			var p pb.NodeReport
			require.NoError(t, proto.Unmarshal(sr.Payload, &p))
			p.SentAt = nil
			sr.Payload, err = proto.Marshal(&p)
			require.NoError(t, err)
			sr.Signature = keys["cp2"].Sign(sr.Payload)
			return sr
		}},
		{"another agent instance", ReasonMalformed, func() *pb.SignedReport {
			return bad.next(func(r *report.NodeReport) { r.AgentInstanceID = "someone-else" })
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sr := tc.report()
			before := rejected(t, ts, tc.reason)
			acceptedBefore := ts.sink.count("cp2")
			seqsBefore := ts.sink.seqs("cp2")
			got := bad.send(sr)
			assert.False(t, got.GetAccepted())
			assert.Equal(t, tc.reason, got.GetRejectReason())
			assert.Equal(t, before+1, rejected(t, ts, tc.reason), "counted once under %s", tc.reason)
			assert.Equal(t, acceptedBefore, ts.sink.count("cp2"), "nothing reached the state")
			assert.Equal(t, seqsBefore, ts.sink.seqs("cp2"))
		})
	}
	// Nothing rejected moved the replay state: the next sequence is accepted.
	next := bad.next(nil)
	assert.True(t, bad.send(next).GetAccepted())
	seqs := ts.sink.seqs("cp2")
	assert.Equal(t, bad.seq, seqs[len(seqs)-1])

	// A flood from cp3: 400 reports pipelined as fast as the stream takes
	// them. The bucket lets burst + rate*elapsed through.
	flooder, ack, err := connect(t, ts, keys["cp3"], "cp3", "")
	require.NoError(t, err)
	require.True(t, ack.GetAccepted())
	const flood = 400
	limitedBefore := rejected(t, ts, ReasonRateLimited)
	start := time.Now()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range flood {
			if err := flooder.stream.Send(&pb.IngestRequest{Msg: &pb.IngestRequest_Report{Report: flooder.next(nil)}}); err != nil {
				return
			}
		}
	}()
	var floodAccepted, floodLimited int
	for range flood {
		resp, err := flooder.stream.Recv()
		require.NoError(t, err)
		switch {
		case resp.GetAck().GetAccepted():
			floodAccepted++
		case resp.GetAck().GetRejectReason() == ReasonRateLimited:
			floodLimited++
		default:
			t.Fatalf("flood report rejected for %s", resp.GetAck().GetRejectReason())
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	allowed := 40 + int(20*elapsed.Seconds()) + 1
	t.Logf("flood: %d accepted, %d rate limited in %s (bucket allows %d)", floodAccepted, floodLimited, elapsed, allowed)
	assert.LessOrEqual(t, floodAccepted, allowed)
	assert.GreaterOrEqual(t, floodAccepted, 40)
	assert.Equal(t, float64(floodLimited), rejected(t, ts, ReasonRateLimited)-limitedBefore)
	assert.Equal(t, floodAccepted, ts.sink.count("cp3"))

	// The healthy agent was never rejected nor held up.
	time.Sleep(100 * time.Millisecond)
	close(stop)
	<-h.done
	assert.Nil(t, h.bad.Load())
	assert.Greater(t, h.accepted.Load(), int64(5))
	assert.Equal(t, h.sent.Load(), h.accepted.Load())
	assert.Equal(t, int(h.accepted.Load()), ts.sink.count("cp1"))
	assert.Less(t, time.Duration(h.maxRTT.Load()), 2*time.Second, "the healthy agent's acks were not held up")
	t.Logf("healthy agent: %d reports accepted, slowest ack %s", h.accepted.Load(), time.Duration(h.maxRTT.Load()))

	// received = accepted + report-stage rejections.
	var rej float64
	for _, r := range Reasons {
		rej += rejected(t, ts, r)
	}
	received := metrictest.Value(t, ts.reg, "cozy_health_reports_received_total")
	accepted := metrictest.Value(t, ts.reg, "cozy_health_reports_accepted_total")
	assert.Equal(t, received, accepted+rej)
	assert.Equal(t, float64(ts.sink.count("cp1")+ts.sink.count("cp2")+ts.sink.count("cp3")), accepted)

	// Every rejection was logged with node and reason, and the flood's log
	// lines were rate limited.
	var floodLines int
	for _, e := range ts.logs.FilterMessage("report rejected").All() {
		fields := e.ContextMap()
		assert.NotEmpty(t, fields["node"])
		assert.NotEmpty(t, fields["reason"])
		assert.Equal(t, "ingest", fields["component"])
		if fields["node"] == "cp3" {
			floodLines++
		}
	}
	assert.GreaterOrEqual(t, len(ts.logs.FilterMessage("report rejected").FilterField(zap.String("node", "cp2")).All()), 8)
	assert.LessOrEqual(t, floodLines, 2, "a flood of %d rejections logs a line or two", floodLimited)
}

func TestBadHellosCloseTheStream(t *testing.T) {
	dir, keys := devKeys(t, "cp1")
	stranger, err := signing.Generate()
	require.NoError(t, err)
	// An apiserver nobody listens on: TokenReviews fail, which is what
	// auth_unavailable is about. Hellos without a token never reach it.
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1", Timeout: 2 * time.Second})
	require.NoError(t, err)
	ts := startServer(t, Config{InsecureDevKeysDir: dir, HelloTimeout: 500 * time.Millisecond},
		Deps{TokenReviews: cs.AuthenticationV1().TokenReviews()})

	cases := []struct {
		name   string
		key    *signing.Signer
		node   string
		token  string
		reason string
		code   codes.Code
	}{
		{"no token, key not listed", stranger, "cp1", "", ReasonUnknownKey, codes.Unauthenticated},
		{"listed key claiming another node", keys["cp1"], "cp2", "", ReasonNodeMismatch, codes.PermissionDenied},
		{"token review unavailable", stranger, "cp1", fakeJWT(t, DefaultTokenAudience, time.Now().Add(time.Hour), "x"), ReasonAuthUnavailable, codes.Unavailable},
		{"not a token", stranger, "cp1", "a.b.c", ReasonUnauthenticated, codes.Unauthenticated},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := rejected(t, ts, tc.reason)
			_, ack, err := connect(t, ts, tc.key, tc.node, tc.token)
			require.NotNil(t, ack)
			assert.False(t, ack.GetAccepted())
			assert.Equal(t, tc.reason, ack.GetRejectReason())
			assert.Equal(t, tc.code, status.Code(err), "%v", err)
			assert.Equal(t, before+1, rejected(t, ts, tc.reason))
		})
	}

	t.Run("hello with a key id that is not its key's", func(t *testing.T) {
		before := rejected(t, ts, ReasonMalformed)
		st, _ := dial(t, ts)
		require.NoError(t, st.Send(&pb.IngestRequest{Msg: &pb.IngestRequest_Hello{Hello: &pb.Hello{
			PublicKey: keys["cp1"].PublicKey(), KeyId: stranger.KeyID(), AgentInstanceId: "i", NodeName: "cp1",
		}}}))
		resp, err := st.Recv()
		require.NoError(t, err)
		assert.Equal(t, ReasonMalformed, resp.GetAck().GetRejectReason())
		_, err = st.Recv()
		assert.Equal(t, codes.InvalidArgument, status.Code(err))
		assert.Equal(t, before+1, rejected(t, ts, ReasonMalformed))
	})
	t.Run("hello with a public key that is no point of the curve", func(t *testing.T) {
		before := rejected(t, ts, ReasonMalformed)
		st, _ := dial(t, ts)
		// y = 2 is on no point: crypto/ed25519 refuses every signature by
		// this key, so the stream is refused at its Hello.
		notAPoint := append([]byte{2}, make([]byte, 31)...)
		require.NoError(t, st.Send(&pb.IngestRequest{Msg: &pb.IngestRequest_Hello{Hello: &pb.Hello{
			PublicKey: notAPoint, KeyId: signing.KeyID(notAPoint), AgentInstanceId: "i", NodeName: "cp1",
		}}}))
		resp, err := st.Recv()
		require.NoError(t, err)
		assert.Equal(t, ReasonMalformed, resp.GetAck().GetRejectReason())
		_, err = st.Recv()
		assert.Equal(t, codes.InvalidArgument, status.Code(err))
		assert.Contains(t, status.Convert(err).Message(), "no point of the curve")
		assert.Equal(t, before+1, rejected(t, ts, ReasonMalformed))
	})
	t.Run("hello with an agent version over report.Limits", func(t *testing.T) {
		before := rejected(t, ts, ReasonMalformed)
		st, _ := dial(t, ts)
		require.NoError(t, st.Send(&pb.IngestRequest{Msg: &pb.IngestRequest_Hello{Hello: &pb.Hello{
			PublicKey: keys["cp1"].PublicKey(), KeyId: keys["cp1"].KeyID(), AgentInstanceId: "i", NodeName: "cp1",
			AgentVersion: strings.Repeat("v", report.MaxAgentVersion+1),
		}}}))
		resp, err := st.Recv()
		require.NoError(t, err)
		require.Equal(t, ReasonMalformed, resp.GetAck().GetRejectReason())
		_, err = st.Recv()
		assert.Equal(t, codes.InvalidArgument, status.Code(err))
		assert.Equal(t, before+1, rejected(t, ts, ReasonMalformed))
	})
	t.Run("hello with a string that is not UTF-8", func(t *testing.T) {
		before := rejected(t, ts, ReasonMalformed)
		// The generated marshaller sends what proto.Marshal would refuse.
		st, _ := dial(t, ts, grpc.ForceCodecV2(newCodec()))
		require.NoError(t, st.Send(&pb.IngestRequest{Msg: &pb.IngestRequest_Hello{Hello: &pb.Hello{
			PublicKey: keys["cp1"].PublicKey(), KeyId: keys["cp1"].KeyID(), AgentInstanceId: "i\xff", NodeName: "cp1",
		}}}))
		resp, err := st.Recv()
		require.NoError(t, err)
		assert.Equal(t, ReasonMalformed, resp.GetAck().GetRejectReason())
		assert.Equal(t, before+1, rejected(t, ts, ReasonMalformed))
	})
	t.Run("report before hello", func(t *testing.T) {
		before := rejected(t, ts, ReasonNoHello)
		st, _ := dial(t, ts)
		sr, err := keys["cp1"].SignReport(sampleReport("cp1", "i", 1, time.Now(), 3))
		require.NoError(t, err)
		require.NoError(t, st.Send(&pb.IngestRequest{Msg: &pb.IngestRequest_Report{Report: sr}}))
		_, err = st.Recv()
		assert.Equal(t, codes.InvalidArgument, status.Code(err))
		assert.Equal(t, before+1, rejected(t, ts, ReasonNoHello))
		assert.Zero(t, ts.sink.count("cp1"))
	})
	t.Run("silence instead of hello", func(t *testing.T) {
		before := rejected(t, ts, ReasonNoHello)
		st, _ := dial(t, ts)
		start := time.Now()
		_, err := st.Recv()
		assert.Equal(t, codes.DeadlineExceeded, status.Code(err))
		assert.Less(t, time.Since(start), 10*time.Second)
		assert.Equal(t, before+1, rejected(t, ts, ReasonNoHello))
	})
	t.Run("message over the gRPC limit", func(t *testing.T) {
		a, ack, err := connect(t, ts, keys["cp1"], "cp1", "")
		require.NoError(t, err)
		require.True(t, ack.GetAccepted())
		before := rejected(t, ts, ReasonOversized)
		huge := make([]byte, DefaultMaxPayloadBytes+2*envelopeSlack)
		err = a.stream.Send(&pb.IngestRequest{Msg: &pb.IngestRequest_Report{Report: &pb.SignedReport{Payload: huge, KeyId: keys["cp1"].KeyID(), Signature: keys["cp1"].Sign(huge)}}})
		if err == nil {
			_, err = a.stream.Recv()
		}
		assert.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
		require.Eventually(t, func() bool { return rejected(t, ts, ReasonOversized) == before+1 }, 5*time.Second, 20*time.Millisecond)
	})
	t.Run("second hello on an open stream", func(t *testing.T) {
		a, ack, err := connect(t, ts, keys["cp1"], "cp1", "")
		require.NoError(t, err)
		require.True(t, ack.GetAccepted())
		before := rejected(t, ts, ReasonMalformed)
		require.NoError(t, a.stream.Send(&pb.IngestRequest{Msg: &pb.IngestRequest_Hello{Hello: &pb.Hello{NodeName: "cp2"}}}))
		resp, err := a.stream.Recv()
		require.NoError(t, err)
		assert.Equal(t, ReasonMalformed, resp.GetAck().GetRejectReason())
		assert.Equal(t, before+1, rejected(t, ts, ReasonMalformed))
		assert.True(t, a.send(a.next(nil)).GetAccepted(), "the stream stays bound to cp1")
	})
	assert.Zero(t, metrictest.Value(t, ts.reg, "cozy_health_ingest_token_reviews_total", "result", "reviewed"))
	assert.Equal(t, 1.0, metrictest.Value(t, ts.reg, "cozy_health_ingest_token_reviews_total", "result", "error"))
}

func TestAcksCarryTheDesiredInterval(t *testing.T) {
	dir, keys := devKeys(t, "cp1")
	ts := startServer(t, Config{InsecureDevKeysDir: dir, DesiredInterval: 7 * time.Second}, Deps{})
	a, ack, err := connect(t, ts, keys["cp1"], "cp1", "")
	require.NoError(t, err)
	assert.Equal(t, 7*time.Second, ack.GetDesiredInterval().AsDuration())
	assert.Equal(t, 7*time.Second, a.send(a.next(nil)).GetDesiredInterval().AsDuration())
}

func TestConfigValidate(t *testing.T) {
	assert.NoError(t, DefaultConfig().Validate())
	d := DefaultConfig()
	assert.Equal(t, DefaultSkewWindow, d.SkewWindow)
	assert.Equal(t, DefaultMaxPayloadBytes, d.MaxPayloadBytes)
	for name, mutate := range map[string]func(*Config){
		"no audience":         func(c *Config) { c.TokenAudience = "" },
		"sa without ns":       func(c *Config) { c.AgentServiceAccount = "agent" },
		"sa with two slashes": func(c *Config) { c.AgentServiceAccount = "a/b/c" },
		"negative skew":       func(c *Config) { c.SkewWindow = -time.Second },
		"rate below interval": func(c *Config) { c.RatePerNode = 0.1; c.DesiredInterval = time.Second },
	} {
		c := DefaultConfig()
		mutate(&c)
		assert.Error(t, c.Validate(), name)
	}
	_, err := New(DefaultConfig(), Deps{Sink: newRecordingSink()})
	assert.ErrorContains(t, err, "TokenReview client is required")
	_, err = ServerOptions(DefaultConfig())
	assert.Error(t, err, "no TLS files")
}

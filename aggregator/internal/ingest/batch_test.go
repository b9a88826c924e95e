package ingest

import (
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/cozystack/cozy-health/aggregator/internal/ingest/verify"
	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/pkg/signing"
	"github.com/cozystack/cozy-health/pkg/wire"
	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
)

func newBatchTestServer(t *testing.T, dir string, now time.Time, sink Sink) *Server {
	t.Helper()
	srv, err := New(Config{
		TokenAudience: DefaultTokenAudience, AgentServiceAccount: DefaultAgentServiceAccount, InsecureDevKeysDir: dir,
		MaxPayloadBytes: 16 << 10, SkewWindow: time.Minute, RatePerNode: 0.5, RateBurst: 6,
	}, Deps{Sink: sink, Registerer: prometheus.NewRegistry(), Now: func() time.Time { return now }})
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	return srv
}

// batchInput is one report on one stream.
type batchInput struct {
	name string
	sess *session
	sr   *pb.SignedReport
}

func mustHexB(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

// batchInputs are reports that meet every report-stage rejection reason,
// and accepted ones between them, some signed by crafted small-order keys
// with signatures crypto/ed25519 accepts (R = B, S = 1 by the identity)
// and refuses (a non-canonical R), all of which ZIP-215 accepts.
func batchInputs(t *testing.T, signers map[string]*signing.Signer, now time.Time) []batchInput {
	t.Helper()
	var in []batchInput
	sessions := map[string]*session{}
	for node, s := range signers {
		sessions[node] = &session{Session: verify.Session{Node: node, Key: s.VerifyKey(), KeyID: s.KeyID(), Instance: "inst-" + node}, peer: "10.0.0.1:1"}
	}
	seq := map[string]uint64{}
	signed := func(node string, mutate func(*report.NodeReport)) *pb.SignedReport {
		seq[node]++
		r := sampleReport(node, "inst-"+node, seq[node], now, 8)
		if mutate != nil {
			mutate(r)
		}
		sr, err := signers[node].SignReport(r)
		require.NoError(t, err)
		return sr
	}
	add := func(name, node string, sr *pb.SignedReport) {
		in = append(in, batchInput{name: name, sess: sessions[node], sr: sr})
	}
	// Crafted keys: A = identity; crypto/ed25519 and ZIP-215 both accept
	// R = B, S = 1 over any message, ZIP-215 also R = identity encoded
	// non-canonically, S = 0.
	identity := mustHexB("0100000000000000000000000000000000000000000000000000000000000000")
	nonCanonicalIdentity := mustHexB("eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f")
	base := mustHexB("5866666666666666666666666666666666666666666666666666666666666666")
	one := append([]byte{1}, make([]byte, 31)...)
	for i, sig := range [][]byte{append(append([]byte(nil), base...), one...), append(append([]byte(nil), nonCanonicalIdentity...), make([]byte, 32)...)} {
		node := fmt.Sprintf("crafted-%d", i)
		k, err := signing.NewVerifyKey(identity)
		require.NoError(t, err)
		sessions[node] = &session{Session: verify.Session{Node: node, Key: k, KeyID: signing.KeyID(ed25519.PublicKey(identity)), Instance: "inst-" + node}}
		for s := uint64(1); s <= 2; s++ {
			payload, err := proto.MarshalOptions{Deterministic: true}.Marshal(wire.ReportToProto(sampleReport(node, "inst-"+node, s, now, 8)))
			require.NoError(t, err)
			add("small-order key", node, &pb.SignedReport{Payload: payload, KeyId: sessions[node].KeyID, Signature: sig})
		}
	}
	for range 2 {
		for _, node := range []string{"a", "b", "c"} {
			add("good", node, signed(node, nil))
		}
	}
	big := signed("a", nil)
	big.Payload = make([]byte, 17<<10)
	add("oversized", "a", big)
	nosig := signed("b", nil)
	nosig.Signature = nil
	add("missing signature", "b", nosig)
	wrongKey := signed("c", nil)
	wrongKey.KeyId = "0000000000000000"
	add("unknown key", "c", wrongKey)
	bad := signed("a", nil)
	bad.Signature[3] ^= 0x40
	add("bad signature", "a", bad)
	add("good after a bad signature", "b", signed("b", nil))
	short := signed("b", nil)
	short.Signature = short.Signature[:63]
	add("63-byte signature", "b", short)
	garbage, err := signers["c"].SignReport(&report.NodeReport{NodeName: "c"})
	require.NoError(t, err)
	garbage.Payload = []byte{0xff, 0xff, 0xff}
	garbage.Signature = signers["c"].Sign(garbage.Payload)
	add("malformed", "c", garbage)
	add("node mismatch", "a", signed("a", func(r *report.NodeReport) { r.NodeName = "b" }))
	add("skew", "b", signed("b", func(r *report.NodeReport) { r.SentAt = now.Add(-time.Hour) }))
	rep := signed("c", nil)
	add("accepted", "c", rep)
	add("replay", "c", rep)
	// Node d: 6 reports pass the bucket, the rest are rate_limited.
	for range 8 {
		add("rate", "d", signed("d", nil))
	}
	bad2 := signed("d", nil)
	bad2.Signature[40] ^= 1
	add("rate-limited bad signature", "d", bad2)
	return in
}

// serverState is what the checks leave behind: acks, the sink's reports,
// the counters and the latest table.
func serverState(t *testing.T, srv *Server, sink *recordingSink, acks []*pb.IngestResponse) string {
	t.Helper()
	out := fmt.Sprintf("received %v accepted %v\n", testutil.ToFloat64(srv.m.received), testutil.ToFloat64(srv.m.accepted))
	for _, r := range Reasons {
		if v := testutil.ToFloat64(srv.m.rejected.WithLabelValues(r)); v != 0 {
			out += fmt.Sprintf("rejected %s %v\n", r, v)
		}
	}
	for _, a := range acks {
		out += fmt.Sprintf("ack %d %v %s\n", a.GetAck().GetSequence(), a.GetAck().GetAccepted(), a.GetAck().GetRejectReason())
	}
	for _, node := range []string{"a", "b", "c", "d", "crafted-0", "crafted-1"} {
		out += fmt.Sprintf("sink %s %v\n", node, sink.seqs(node))
	}
	return out
}

// The batched path leaves exactly what handleReport, report by report,
// leaves: the same acks (sequence, verdict, reason), counters and accepted
// reports, whichever way the reports are cut into batches.
func TestVerifyJobsMatchesHandleReport(t *testing.T) {
	dir, signers := devKeys(t, "a", "b", "c", "d")
	now := time.Unix(1_800_000_000, 0)
	in := batchInputs(t, signers, now)

	singleSink := newRecordingSink()
	single := newBatchTestServer(t, dir, now, singleSink)
	var singleAcks []*pb.IngestResponse
	for _, x := range in {
		singleAcks = append(singleAcks, single.handleReport(x.sess, x.sr))
	}
	want := serverState(t, single, singleSink, singleAcks)
	require.Contains(t, want, "sink crafted-1 [1 2]", "the non-canonical R (ZIP-215) is accepted")
	for _, r := range []string{ReasonOversized, ReasonRateLimited, ReasonMissingSignature, ReasonUnknownKey, ReasonBadSignature, ReasonMalformed, ReasonNodeMismatch, ReasonSkew, ReasonReplay} {
		require.Contains(t, want, "rejected "+r+" ", "the inputs meet %s", r)
	}

	r := rand.New(rand.NewPCG(7, 8))
	for _, cut := range []string{"one batch", "batches of 1", "random batches"} {
		t.Run(cut, func(t *testing.T) {
			sink := newRecordingSink()
			srv := newBatchTestServer(t, dir, now, sink)
			vb := newVerifierBatch()
			acks := make([]*pb.IngestResponse, 0, len(in))
			for i := 0; i < len(in); {
				n := len(in)
				switch cut {
				case "batches of 1":
					n = 1
				case "random batches":
					n = 1 + r.IntN(8)
				}
				n = min(n, len(in)-i)
				// A job per report: in one batch, no two reports of
				// one stream could meet, but the checks must not
				// depend on it.
				jobs := make([]*verifyJob, n)
				for k := range n {
					jobs[k] = &verifyJob{sess: in[i+k].sess, sr: in[i+k].sr, resp: make(chan *pb.IngestResponse, 1)}
				}
				vb.jobs = append(vb.jobs[:0], jobs...)
				srv.verifyJobs(vb)
				for _, j := range jobs {
					acks = append(acks, <-j.resp)
				}
				i += n
			}
			require.Equal(t, want, serverState(t, srv, sink, acks))
		})
	}
}

// Many streams at once through the running verifiers: reports gather into
// batches, a bad signature is rejected as bad_signature on its own stream
// and the good reports beside it are accepted, every admitted signature is
// counted in exactly one batch.
func TestConcurrentStreamsAreBatched(t *testing.T) {
	nodes := make([]string, 40)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("n%02d", i)
	}
	dir, signers := devKeys(t, nodes...)
	sink := newRecordingSink()
	srv, err := New(Config{TokenAudience: DefaultTokenAudience, AgentServiceAccount: DefaultAgentServiceAccount, InsecureDevKeysDir: dir, RatePerNode: 1e9, RateBurst: 1 << 30},
		Deps{Sink: sink, Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	defer srv.Stop()
	const perStream = 25
	var wg sync.WaitGroup
	for i, node := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sess := &session{Session: verify.Session{Node: node, Key: signers[node].VerifyKey(), KeyID: signers[node].KeyID(), Instance: "inst"}}
			job := &verifyJob{sess: sess, resp: make(chan *pb.IngestResponse, 1)}
			for seq := uint64(1); seq <= perStream; seq++ {
				sr, err := signers[node].SignReport(sampleReport(node, "inst", seq, time.Now(), 4))
				if err != nil {
					t.Error(err)
					return
				}
				bad := i%4 == 0 && seq%5 == 0
				if bad {
					sr.Signature[10] ^= 1
				}
				ack := srv.verifyReport(job, sr).GetAck()
				if bad && ack.GetRejectReason() != ReasonBadSignature || !bad && !ack.GetAccepted() {
					t.Errorf("%s seq %d (bad signature: %v): ack %v", node, seq, bad, ack)
				}
			}
		}()
	}
	wg.Wait()
	bad := len(nodes) / 4 * perStream / 5
	require.Equal(t, float64(len(nodes)*perStream-bad), testutil.ToFloat64(srv.m.accepted))
	require.Equal(t, float64(bad), testutil.ToFloat64(srv.m.rejected.WithLabelValues(ReasonBadSignature)))
	var m dto.Metric
	require.NoError(t, srv.m.verifyBatchSize.Write(&m))
	h := m.GetHistogram()
	require.Equal(t, float64(len(nodes)*perStream), h.GetSampleSum(), "every signature is counted in one batch")
	t.Logf("%d batches, %.1f signatures a batch", h.GetSampleCount(), h.GetSampleSum()/float64(h.GetSampleCount()))
	require.Less(t, h.GetSampleCount(), uint64(len(nodes)*perStream), "some reports were batched")
}

// reportBatchSizes reports the mean of cozy_health_ingest_verify_batch_size
// as sigs/batch (BenchmarkIngestVerifiers).
func reportBatchSizes(b *testing.B, srv *Server) {
	var m dto.Metric
	if err := srv.m.verifyBatchSize.Write(&m); err != nil {
		b.Fatal(err)
	}
	if h := m.GetHistogram(); h.GetSampleCount() > 0 {
		b.ReportMetric(h.GetSampleSum()/float64(h.GetSampleCount()), "sigs/batch")
	}
}

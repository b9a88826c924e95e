package verify

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/pkg/signing"
	"github.com/cozystack/cozy-health/pkg/wire"
	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
)

func sample(node, instance string, seq uint64, sentAt time.Time, n int) *report.NodeReport {
	r := &report.NodeReport{NodeName: node, AgentInstanceID: instance, Sequence: seq, SentAt: sentAt, Interval: 5 * time.Second, AgentVersion: "v0.1.0"}
	for i := range n {
		r.Observations = append(r.Observations, report.Observation{
			Component: report.ComponentLinstor, Check: report.CheckDRBDResource, Status: report.StatusHealthy, Reason: "UpToDate",
			ResourceRef: &report.ResourceRef{Kind: report.KindResource, Name: "pvc-" + string(rune('a'+i%26))},
			Attributes:  map[string]float64{report.AttrUpToDate: 1, report.AttrReplicas: 3},
		})
	}
	return r
}

// FuzzVerify feeds arbitrary bytes to the envelope decode + verify path of a
// stream: bytes -> IngestRequest -> every report check -> accept. It must
// never panic, and whatever it accepts must carry a valid signature of the
// stream's key over a decodable report for the stream's node, with a
// sequence above every one accepted before.
//
//	go test -run '^$' -fuzz FuzzVerify -fuzztime 60s ./aggregator/internal/ingest/verify/
func FuzzVerify(f *testing.F) {
	key, err := signing.Generate()
	if err != nil {
		f.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	c := New(Limits{MaxPayloadBytes: 64 << 10, SkewWindow: time.Minute, RatePerNode: 1e9, RateBurst: 1 << 30})
	sess := &Session{Node: "cp1", Key: key.VerifyKey(), KeyID: key.KeyID(), Instance: "inst"}
	var accepted []*report.NodeReport
	accept := func(r *report.NodeReport, _ time.Time) { accepted = append(accepted, r) }

	envelope := func(sr *pb.SignedReport) []byte {
		b, err := proto.Marshal(&pb.IngestRequest{Msg: &pb.IngestRequest_Report{Report: sr}})
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	for seq := uint64(1); seq <= 3; seq++ {
		sr, err := key.SignReport(sample("cp1", "inst", seq, now, int(seq)*2))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(envelope(sr))
		tampered := proto.Clone(sr).(*pb.SignedReport)
		tampered.Payload[len(tampered.Payload)/3] ^= 0x40
		f.Add(envelope(tampered))
		f.Add(sr.Payload)
	}
	other, err := key.SignReport(sample("cp2", "inst", 9, now, 2))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(envelope(other))
	f.Add([]byte{})
	f.Add([]byte{0x12, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add(append([]byte("\x0a\x05hello\x12\x03abc\x1a\x40"), make([]byte, 64)...))

	f.Fuzz(func(t *testing.T, data []byte) {
		var req pb.IngestRequest
		if err := proto.Unmarshal(data, &req); err != nil {
			return
		}
		sr := req.GetReport()
		if sr == nil {
			return
		}
		before := len(accepted)
		var last uint64
		if before > 0 {
			last = accepted[before-1].Sequence
		}
		_, reason, _ := c.Verify(sess, sr, now, accept)
		if reason != "" {
			if len(accepted) != before {
				t.Fatal("a rejected report was accepted")
			}
			return
		}
		if len(accepted) != before+1 {
			t.Fatal("an accepted report was not handed over exactly once")
		}
		if err := signing.Verify(key.PublicKey(), sr.GetPayload(), sr.GetSignature()); err != nil {
			t.Fatalf("accepted a report whose signature does not verify: %v", err)
		}
		var p pb.NodeReport
		if err := proto.Unmarshal(sr.GetPayload(), &p); err != nil {
			t.Fatalf("accepted an undecodable payload: %v", err)
		}
		r, err := wire.ReportFromProto(&p)
		if err != nil || r.NodeName != "cp1" {
			t.Fatalf("accepted a report that is malformed or for another node: %v", err)
		}
		if r.Sequence <= last {
			t.Fatalf("accepted sequence %d after %d", r.Sequence, last)
		}
	})
}

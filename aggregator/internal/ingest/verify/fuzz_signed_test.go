package verify

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/pkg/signing"
	"github.com/cozystack/cozy-health/pkg/wire"
	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
)

// FuzzVerifySigned reaches past the signature check: every input is a
// report payload that the stream's own key signs, so it meets the decoder,
// the bounds, the node binding, the skew and replay checks. With fix set,
// a payload that decodes gets the stream's node and instance, a sent-at of
// now and the next sequence, so it meets the bounds and the sink too. It
// must never panic; whatever is accepted is within report.Limits and is
// the stream's node's.
//
//	go test -run '^$' -fuzz FuzzVerifySigned -fuzztime 60s ./aggregator/internal/ingest/verify/
func FuzzVerifySigned(f *testing.F) {
	key, err := signing.Generate()
	if err != nil {
		f.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	c := New(Limits{MaxPayloadBytes: report.MaxReportBytes, SkewWindow: time.Minute, RatePerNode: 1e9, RateBurst: 1 << 30})
	sess := &Session{Node: "cp1", Key: key.VerifyKey(), KeyID: key.KeyID(), Instance: "inst"}
	var accepted []*report.NodeReport
	accept := func(r *report.NodeReport, _ time.Time) { accepted = append(accepted, r) }
	seq := uint64(0)

	for i := range 3 {
		b, err := wire.ReportToProto(sample("cp1", "inst", uint64(i+1), now, i*3)).MarshalVT()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, i > 0)
	}
	f.Add([]byte{}, true)
	f.Add([]byte("\x0a\x03cp1\x12\x04inst\x42\x00"), true)

	f.Fuzz(func(t *testing.T, payload []byte, fix bool) {
		if fix {
			var p pb.NodeReport
			if p.UnmarshalVT(payload) == nil {
				seq++
				p.NodeName, p.AgentInstanceId, p.Sequence = "cp1", "inst", seq
				p.SentAt = timestamppb.New(now)
				if p.Interval == nil {
					p.Interval = durationpb.New(5 * time.Second)
				}
				if b, err := p.MarshalVT(); err == nil {
					payload = b
				}
			}
		}
		sig := key.Sign(payload)
		before := len(accepted)
		_, reason, _ := c.Verify(sess, &pb.SignedReport{Payload: payload, Signature: sig, KeyId: key.KeyID()}, now, accept)
		if reason != "" {
			if len(accepted) != before {
				t.Fatal("a refused report reached the sink")
			}
			return
		}
		if len(accepted) != before+1 {
			t.Fatal("an accepted report was not handed over exactly once")
		}
		r := accepted[before]
		if r.NodeName != "cp1" || r.AgentInstanceID != "inst" {
			t.Fatalf("accepted a report of %s/%s on the stream of cp1/inst", r.NodeName, r.AgentInstanceID)
		}
		if err := r.CheckBounds(); err != nil {
			t.Fatalf("accepted a report outside report.Limits: %v", err)
		}
		if len(accepted) > 64 {
			accepted = accepted[:0]
		}
	})
}

package signing

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/pkg/wire"
	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
)

// FuzzVerifyEnvelope decodes arbitrary bytes as a SignedReport, verifies it
// and decodes its payload: it must never panic, and only the exact signed
// bytes verify.
//
//	go test -run '^$' -fuzz FuzzVerifyEnvelope -fuzztime 60s ./pkg/signing/
func FuzzVerifyEnvelope(f *testing.F) {
	s, err := Generate()
	if err != nil {
		f.Fatal(err)
	}
	good, err := s.SignReport(&report.NodeReport{NodeName: "cp1", AgentInstanceID: "i", Sequence: 1, SentAt: time.Unix(1_800_000_000, 0), Interval: 5 * time.Second,
		Observations: []report.Observation{{Component: report.ComponentDisk, Check: report.CheckFsyncProbe, Status: report.StatusHealthy, Attributes: map[string]float64{report.AttrFsyncP99Seconds: 0.003}}}})
	if err != nil {
		f.Fatal(err)
	}
	b, err := proto.Marshal(good)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add(good.GetPayload())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		var sr pb.SignedReport
		if proto.Unmarshal(data, &sr) != nil {
			return
		}
		if Verify(s.PublicKey(), sr.GetPayload(), sr.GetSignature()) != nil {
			return
		}
		if string(sr.GetPayload()) != string(good.GetPayload()) {
			t.Fatalf("a payload that was never signed verifies")
		}
		var p pb.NodeReport
		if err := proto.Unmarshal(sr.GetPayload(), &p); err != nil {
			t.Fatalf("signed payload does not decode: %v", err)
		}
		if _, err := wire.ReportFromProto(&p); err != nil {
			t.Fatalf("signed payload does not convert: %v", err)
		}
	})
}

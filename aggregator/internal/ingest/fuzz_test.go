package ingest

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/cozystack/cozy-health/pkg/signing"
	"github.com/cozystack/cozy-health/pkg/wire"
	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
)

// FuzzVerify feeds arbitrary bytes to the envelope decode + verify path of a
// stream: bytes -> IngestRequest -> every report check -> sink. It must never
// panic, and whatever it accepts must carry a valid signature of the
// stream's key over a decodable report for the stream's node.
//
//	go test -run '^$' -fuzz FuzzVerify -fuzztime 60s ./aggregator/internal/ingest/
func FuzzVerify(f *testing.F) {
	dir := f.TempDir()
	privPath, err := signing.WriteDevKeyPair(dir, "cp1")
	if err != nil {
		f.Fatal(err)
	}
	key, err := signing.LoadKeyFile(privPath)
	if err != nil {
		f.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	sink := newRecordingSink()
	reg := prometheus.NewRegistry()
	srv, err := New(Config{
		TokenAudience: DefaultTokenAudience, AgentServiceAccount: DefaultAgentServiceAccount, InsecureDevKeysDir: dir,
		MaxPayloadBytes: 64 << 10, RatePerNode: 1e9, RateBurst: 1 << 30,
	}, Deps{Sink: sink, Registerer: reg, Now: func() time.Time { return now }})
	if err != nil {
		f.Fatal(err)
	}
	sess := &session{node: "cp1", key: key.PublicKey(), keyID: key.KeyID(), instance: "inst"}

	envelope := func(sr *pb.SignedReport) []byte {
		b, err := proto.Marshal(&pb.IngestRequest{Msg: &pb.IngestRequest_Report{Report: sr}})
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	for seq := uint64(1); seq <= 3; seq++ {
		sr, err := key.SignReport(sampleReport("cp1", "inst", seq, now, int(seq)*2))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(envelope(sr))
		tampered := proto.Clone(sr).(*pb.SignedReport)
		tampered.Payload[len(tampered.Payload)/3] ^= 0x40
		f.Add(envelope(tampered))
		f.Add(sr.Payload)
	}
	other, err := key.SignReport(sampleReport("cp2", "inst", 9, now, 2))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(envelope(other))
	f.Add([]byte{})
	f.Add([]byte{0x12, 0xff, 0xff, 0xff, 0xff, 0x0f})
	garbage := []byte("\x0a\x05hello\x12\x03abc\x1a\x40")
	f.Add(append(garbage, make([]byte, 64)...))

	f.Fuzz(func(t *testing.T, data []byte) {
		var req pb.IngestRequest
		if err := proto.Unmarshal(data, &req); err != nil {
			return
		}
		sr := req.GetReport()
		if sr == nil {
			return
		}
		before := sink.count("cp1")
		ack := srv.handleReport(sess, sr).GetAck()
		if !ack.GetAccepted() {
			if ack.GetRejectReason() == "" {
				t.Fatal("rejected without a reason")
			}
			if sink.count("cp1") != before {
				t.Fatal("a rejected report reached the sink")
			}
			return
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
			t.Fatalf("accepted a report that is malformed or for another node: %v %q", err, r.NodeName)
		}
		if sink.count("cp1") != before+1 {
			t.Fatal("an accepted report did not reach the sink")
		}
	})
}

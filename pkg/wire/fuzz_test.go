package wire

import (
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
)

// FuzzUnmarshalVT drives the server's decoder (vtprotobuf's UnmarshalVT,
// the reflection-free one ingest uses) and ReportFromProto with arbitrary
// bytes, against the reference decoder proto.Unmarshal: neither may panic;
// what both accept they decode alike; what the fast one accepts and
// ReportFromProto converts the reference accepts too, but for the UTF-8
// of an overwritten occurrence of a field (ReportFromProto checks the
// UTF-8 of what is kept, which UnmarshalVT does not), is within
// report.Limits, and survives a round trip.
//
//	go test -run '^$' -fuzz FuzzUnmarshalVT -fuzztime 60s ./pkg/wire/
func FuzzUnmarshalVT(f *testing.F) {
	for _, n := range []int{0, 1, 5} {
		b, err := ReportToProto(drbdReport(n, map[int]bool{0: true})).MarshalVT()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x0a, 0x02, 0xc3, 0x28})             // node name, not UTF-8
	f.Add([]byte{0x4a, 0x05, 0x0a, 0x03, 0x66, 0x6f}) // a truncated observation
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast, ref pb.NodeReport
		fastErr := fast.UnmarshalVT(data)
		refErr := proto.Unmarshal(data, &ref)
		// UnmarshalVT refuses more than proto.Unmarshal (a known field
		// with the wrong wire type, which the reference keeps as an unknown
		// field): ingest refuses a payload no agent sends. What both
		// accept, they decode to the same report (the fast decoder drops
		// unknown fields inside a timestamp, which no consumer reads).
		if refErr == nil && fastErr == nil {
			a, aErr := ReportFromProto(&fast)
			b, bErr := ReportFromProto(&ref)
			if (aErr == nil) != (bErr == nil) || !reflect.DeepEqual(a, b) {
				t.Fatalf("UnmarshalVT and proto.Unmarshal decode different reports: %v / %v", aErr, bErr)
			}
		}
		if fastErr != nil {
			return
		}
		r, err := ReportFromProto(&fast)
		if err != nil {
			return
		}
		// The reference also refuses a string that is not UTF-8 in an
		// occurrence of a field that a later one overwrites; the fast
		// decoder keeps the last, which ReportFromProto checks. Any
		// other refusal of the reference must be ours too.
		if refErr != nil && !strings.Contains(refErr.Error(), "invalid UTF-8") {
			t.Fatalf("ReportFromProto accepted what proto.Unmarshal refuses: %v", refErr)
		}
		if !utf8.ValidString(r.NodeName) {
			t.Fatal("a node name that is not UTF-8")
		}
		if err := r.CheckBounds(); err != nil {
			t.Fatalf("ReportFromProto returned a report outside report.Limits: %v", err)
		}
		back, err := ReportFromProto(ReportToProto(r))
		if err != nil {
			t.Fatalf("round trip: %v", err)
		}
		if back.Sequence != r.Sequence || !back.SentAt.Equal(r.SentAt) || back.Interval != r.Interval || len(back.Observations) != len(r.Observations) {
			t.Fatal("round trip changed the report")
		}
	})
}

package ingest

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/mem"

	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
)

// TestCodecCopiesThePayload: verify.Check decodes a report's strings as
// views of its payload, so the payload the codec hands over must be a copy,
// not a view of gRPC's receive buffer, which is reused once the codec
// returns.
func TestCodecCopiesThePayload(t *testing.T) {
	req := &pb.IngestRequest{Msg: &pb.IngestRequest_Report{Report: &pb.SignedReport{KeyId: "key", Payload: []byte("the report's bytes")}}}
	raw, err := req.MarshalVT()
	require.NoError(t, err)
	var got pb.IngestRequest
	require.NoError(t, newCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(raw)}, &got))
	// gRPC's next message lands in the same buffer.
	copy(raw, bytes.Repeat([]byte{'x'}, len(raw)))
	assert.Equal(t, "the report's bytes", string(got.GetReport().GetPayload()))
	assert.Equal(t, "key", got.GetReport().GetKeyId())
}

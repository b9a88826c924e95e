package wire

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
)

// ackingServer acknowledges every request of a stream, as the aggregator does.
type ackingServer struct {
	pb.UnimplementedIngestServiceServer
}

func (ackingServer) Ingest(stream pb.IngestService_IngestServer) error {
	for seq := uint64(1); ; seq++ {
		if _, err := stream.Recv(); err != nil {
			return nil
		}
		if err := stream.Send(&pb.IngestResponse{Ack: &pb.Ack{Sequence: seq, Accepted: true}}); err != nil {
			return err
		}
	}
}

// countingConn counts the writes a client makes to its connection and
// keeps the largest.
type countingConn struct {
	net.Conn
	writes, largest *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	for {
		l := c.largest.Load()
		if int64(len(p)) <= l || c.largest.CompareAndSwap(l, int64(len(p))) {
			break
		}
	}
	return c.Conn.Write(p)
}

// clientWrites streams reports reports of payload bytes, each after the
// previous one's acknowledgement and a pause as an agent does, and returns
// how many writes the client made to its connection while doing so and the
// largest.
func clientWrites(t *testing.T, reports, payload int, opts ...grpc.DialOption) (writes, largest int64) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(grpc.StaticStreamWindowSize(64<<10), grpc.StaticConnWindowSize(64<<10))
	pb.RegisterIngestServiceServer(srv, ackingServer{})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	var nWrites, maxWrite atomic.Int64
	dialer := func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: c, writes: &nWrites, largest: &maxWrite}, nil
	}
	conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), append(opts,
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(dialer))...)
	require.NoError(t, err)
	defer conn.Close()
	stream, err := pb.NewIngestServiceClient(conn).Ingest(t.Context())
	require.NoError(t, err)
	// Settle the connection (preface, settings and their acknowledgements)
	// before counting.
	report := &pb.IngestRequest{Msg: &pb.IngestRequest_Report{Report: &pb.SignedReport{Payload: make([]byte, payload)}}}
	require.NoError(t, stream.Send(report))
	_, err = stream.Recv()
	require.NoError(t, err)
	before := nWrites.Load()
	for range reports {
		// Agents report an interval apart: whatever the client writes on its
		// own after an acknowledgement goes out alone, not coalesced with the
		// next report.
		time.Sleep(2 * time.Millisecond)
		require.NoError(t, stream.Send(report))
		_, err := stream.Recv()
		require.NoError(t, err)
	}
	return nWrites.Load() - before, maxWrite.Load()
}

// TestDialOptionsWriteOncePerReport: with DialOptions an ingest client writes
// one record per report; grpc-go's defaults (BDP estimation) add a
// WINDOW_UPDATE and PING after each acknowledgement, which the aggregator
// must read and answer.
func TestDialOptionsWriteOncePerReport(t *testing.T) {
	// A report that fits one record of clientWriteBuffer bytes.
	const reports, payload = 50, 256
	withDefaults, _ := clientWrites(t, reports, payload)
	withOptions, _ := clientWrites(t, reports, payload, DialOptions()...)
	t.Logf("client writes for %d reports: %d with grpc-go's defaults, %d with DialOptions", reports, withDefaults, withOptions)
	assert.LessOrEqual(t, withOptions, int64(reports)+2, "more than one write per report with DialOptions")
	assert.Greater(t, withDefaults, int64(reports)*3/2, "grpc-go's defaults no longer ping after each acknowledgement: DialOptions' fixed windows may be moot")
}

// TestDialOptionsSmallRecords: with DialOptions an ingest client writes a
// report larger than clientWriteBuffer in writes (TLS records, under TLS) of
// at most clientWriteBuffer bytes, so the aggregator's per-connection TLS
// read buffer stays small; grpc-go's defaults write it whole.
func TestDialOptionsSmallRecords(t *testing.T) {
	const reports, payload = 10, 6 << 10
	withDefaults, largestDefaults := clientWrites(t, reports, payload)
	withOptions, largestOptions := clientWrites(t, reports, payload, DialOptions()...)
	t.Logf("client writes for %d reports of %d bytes: %d (largest %d bytes) with grpc-go's defaults, %d (largest %d) with DialOptions",
		reports, payload, withDefaults, largestDefaults, withOptions, largestOptions)
	assert.LessOrEqual(t, largestOptions, int64(clientWriteBuffer), "a write larger than the client's write buffer with DialOptions")
	assert.Greater(t, largestDefaults, int64(payload), "grpc-go's defaults no longer write a report whole: clientWriteBuffer may be moot")
	assert.LessOrEqual(t, withOptions, int64(reports*(payload/clientWriteBuffer+2)+2), "more writes per report than its records with DialOptions")
}

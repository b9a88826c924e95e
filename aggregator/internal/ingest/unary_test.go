package ingest

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/cozystack/cozy-health/pkg/metrictest"
	"github.com/cozystack/cozy-health/pkg/signing"
	"github.com/cozystack/cozy-health/pkg/tlsutil"
)

// halfSentCalls opens one HTTP/2 connection to ts and starts n unary calls
// of method on it, each sending a gRPC message header that announces 64
// bytes and only 2 of them: the request never arrives in full. It returns
// the framer to read the answers from.
func halfSentCalls(t *testing.T, ts *testServer, method string, n int) (*http2.Framer, net.Conn) {
	t.Helper()
	tc, err := tlsutil.ClientConfig(ts.files.CAFile, "127.0.0.1")
	require.NoError(t, err)
	tc.NextProtos = []string{"h2"}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ts.addr, tc)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	_, err = c.Write([]byte(http2.ClientPreface))
	require.NoError(t, err)
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	require.NoError(t, fr.WriteSettings())
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for i := range n {
		hb.Reset()
		for _, f := range [][2]string{{":method", "POST"}, {":scheme", "https"}, {":path", method}, {":authority", "127.0.0.1"},
			{"content-type", "application/grpc"}, {"te", "trailers"}} {
			require.NoError(t, enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}))
		}
		id := uint32(2*i + 1)
		require.NoError(t, fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true}))
		require.NoError(t, fr.WriteData(id, false, []byte{0, 0, 0, 0, 64, 0x0a, 0x00}))
	}
	return fr, c
}

// streamEnds reads frames until every one of n streams has ended (grpc
// status in its trailers, or a reset) or within has passed; it returns the
// grpc-status of each ended stream ("rst" for a reset).
func streamEnds(t *testing.T, fr *http2.Framer, conn net.Conn, n int, within time.Duration) map[uint32]string {
	t.Helper()
	ends := map[uint32]string{}
	_ = conn.SetReadDeadline(time.Now().Add(within))
	for len(ends) < n {
		f, err := fr.ReadFrame()
		if err != nil {
			return ends
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if v := f.PseudoValue("status"); v != "" && !f.StreamEnded() {
				continue // response headers; trailers follow
			}
			for _, hf := range f.Fields {
				if hf.Name == "grpc-status" {
					ends[f.StreamID] = hf.Value
				}
			}
		case *http2.RSTStreamFrame:
			if _, ok := ends[f.StreamID]; !ok {
				ends[f.StreamID] = "rst"
			}
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				_ = fr.WritePing(true, f.Data)
			}
		}
	}
	return ends
}

// TestHalfSentUnaryCallsAreBounded: unary calls on the ingest port (the
// drain check, gRPC health) are admitted as agent streams are before their
// hello: a peer holds at most MaxPendingPerPeer of them (more are refused
// at once, too_many_streams), and one whose request does not arrive in
// full ends after HelloTimeout (call_timeout), freeing its slot. Before, a
// half-sent request held its stream until the connection's max age (30
// minutes), 8 per connection and 16 connections per address.
func TestHalfSentUnaryCallsAreBounded(t *testing.T) {
	cfg := Config{HelloTimeout: time.Second, Surface: SurfaceLimits{MaxPendingPerPeer: 4, LimitLoopback: true}}
	ts := startServerWith(t, cfg, Deps{TokenReviews: newReviewer().client().AuthenticationV1().TokenReviews()}, func(g *grpc.Server) {
		healthpb.RegisterHealthServer(g, health.NewServer())
	})
	const n = 6
	fr, raw := halfSentCalls(t, ts, healthpb.Health_Check_FullMethodName, n)
	start := time.Now()
	ends := streamEnds(t, fr, raw, n, 5*time.Second)
	took := time.Since(start)
	require.Len(t, ends, n, "every half-sent call ended within 5 s (ended: %v)", ends)
	var refused, timedOut int
	for _, st := range ends {
		switch st {
		case "8": // RESOURCE_EXHAUSTED
			refused++
		case "4": // DEADLINE_EXCEEDED
			timedOut++
		}
	}
	assert.Equal(t, n-4, refused, "calls over MaxPendingPerPeer refused: %v", ends)
	assert.Equal(t, 4, timedOut, "admitted calls cut at HelloTimeout: %v", ends)
	assert.GreaterOrEqual(t, took, 900*time.Millisecond)
	assert.Equal(t, float64(n-4), rejected(t, ts, ReasonTooManyStreams))
	require.Eventually(t, func() bool { return rejected(t, ts, ReasonCallTimeout) == 4 }, 2*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool {
		return metrictest.Value(t, ts.reg, "cozy_health_ingest_pending_streams") == 0
	}, 2*time.Second, 20*time.Millisecond, "the slots are free again")
	assert.Positive(t, ts.logs.FilterField(zap.String("reason", ReasonCallTimeout)).Len(), "call_timeout is logged")
}

// connFrom dials ts from the loopback address from.
func connFrom(t *testing.T, ts *testServer, from string) *grpc.ClientConn {
	t.Helper()
	tc, err := tlsutil.ClientConfig(ts.files.CAFile, "127.0.0.1")
	require.NoError(t, err)
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := grpc.NewClient("passthrough:///"+ts.addr, grpc.WithTransportCredentials(credentials.NewTLS(tc)),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestCopiedTokenRefusedFromAnotherAddress: with CheckPeerAddress, a hello
// whose token proves node-1 is refused (peer_address_mismatch, counted
// and logged) when its connection does not come from one of node-1's
// addresses, and the real agent's stream, from node-1's address, stays;
// a node whose addresses are not known is admitted. Before, the copied
// token was accepted from anywhere and replaced the real agent's stream.
func TestCopiedTokenRefusedFromAnotherAddress(t *testing.T) {
	rv := newReviewer()
	addrs := map[string][]string{"node-1": {"10.0.0.1", "127.0.0.2"}}
	ts := startServer(t, Config{CheckPeerAddress: true, Surface: SurfaceLimits{LimitLoopback: true}}, Deps{
		TokenReviews:  rv.client().AuthenticationV1().TokenReviews(),
		NodeAddresses: func(node string) []string { return addrs[node] },
	})
	token := fakeJWT(t, DefaultTokenAudience, time.Now().Add(time.Hour), "node-1-token")
	rv.set(token, "node-1")
	signer, err := signing.Generate()
	require.NoError(t, err)

	// The real agent, from its node's address.
	real, cancel, ack, err := hello(t, connFrom(t, ts, "127.0.0.2"), signer, "node-1", token)
	require.NoError(t, err)
	defer cancel()
	require.True(t, ack.GetAccepted())

	// The same token from a pod elsewhere.
	thief, err := signing.Generate()
	require.NoError(t, err)
	_, cancel2, ack, err := hello(t, connFrom(t, ts, "127.0.0.3"), thief, "node-1", token)
	if cancel2 != nil {
		defer cancel2()
	}
	require.Error(t, err)
	assert.Equal(t, codes.PermissionDenied, status.Code(err))
	assert.Equal(t, ReasonPeerAddressMismatch, ack.GetRejectReason())
	assert.Equal(t, 1.0, rejected(t, ts, ReasonPeerAddressMismatch))
	assert.Equal(t, 1, ts.logs.FilterField(zap.String("reason", ReasonPeerAddressMismatch)).Len())
	assert.Zero(t, metrictest.Value(t, ts.reg, "cozy_health_ingest_streams_replaced_total"))

	// The real agent's stream was not pushed off: it still reports.
	a := &testAgent{t: t, signer: signer, node: "node-1", instance: "i-" + token[len(token)-6:], stream: real}
	assert.True(t, a.send(a.next(nil)).GetAccepted())

	// A node without known addresses is not checked.
	other := fakeJWT(t, DefaultTokenAudience, time.Now().Add(time.Hour), "node-2-token")
	rv.set(other, "node-2")
	_, cancel3, ack, err := hello(t, connFrom(t, ts, "127.0.0.3"), thief, "node-2", other)
	require.NoError(t, err)
	defer cancel3()
	assert.True(t, ack.GetAccepted())
}

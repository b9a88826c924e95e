package uplink

import (
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countingProxy forwards one loopback connection to addr and counts the
// reads that carried bytes from the client (each a burst the client wrote).
type countingProxy struct {
	addr   string
	bursts atomic.Int64
}

func startCountingProxy(t *testing.T, addr string) *countingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	p := &countingProxy{addr: ln.Addr().String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", addr)
			if err != nil {
				_ = c.Close()
				continue
			}
			t.Cleanup(func() { _ = c.Close(); _ = s.Close() })
			go func() { _, _ = io.Copy(c, s) }()
			go func() {
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						p.bursts.Add(1)
						if _, werr := s.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return p
}

// TestOneWritePerReport: between reports the agent sends the aggregator
// nothing of its own (wire.DialOptions: no BDP ping after each ack), against
// the real ingest path. With grpc-go's defaults each report was followed by a
// WINDOW_UPDATE and a PING, two bursts per report.
func TestOneWritePerReport(t *testing.T) {
	l := newLab(t)
	r := l.replica(t)
	p := startCountingProxy(t, r.addr)
	u := l.start(t, nil, p.addr)
	publish(t, u, 100*time.Millisecond)
	require.Eventually(t, func() bool { return r.maxSeq() >= 3 }, 20*time.Second, 10*time.Millisecond)
	seq0, bursts0 := r.maxSeq(), p.bursts.Load()
	require.Eventually(t, func() bool { return r.maxSeq() >= seq0+20 }, 20*time.Second, 10*time.Millisecond)
	reports, bursts := int64(r.maxSeq()-seq0), p.bursts.Load()-bursts0
	t.Logf("%d reports, %d bursts from the agent", reports, bursts)
	assert.LessOrEqual(t, bursts, reports+2, "the agent writes more than its reports: gRPC's BDP pings are back (wire.DialOptions)")
}

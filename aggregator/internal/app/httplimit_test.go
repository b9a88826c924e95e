package app

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"k8s.io/client-go/rest"

	"github.com/cozystack/cozy-health/aggregator/internal/config"
	"github.com/cozystack/cozy-health/pkg/metrictest"
	"github.com/cozystack/cozy-health/pkg/tlsutil"
)

// probeConns opens n connections from the loopback address from to addr,
// each sends one GET /metrics without a token and reads the answer; it
// returns the connections that got an answer and how many were closed
// before one (refused).
func probeConns(t *testing.T, from, addr string, n int) (answered []net.Conn, refused int) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	for range n {
		c, err := d.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		_, err = io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: aggregator\r\n\r\n")
		if err == nil {
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			var res *http.Response
			if res, err = http.ReadResponse(bufio.NewReader(c), nil); err == nil {
				_, _ = io.Copy(io.Discard, res.Body)
				_ = res.Body.Close()
				require.Equal(t, http.StatusUnauthorized, res.StatusCode)
				answered = append(answered, c)
				continue
			}
		}
		require.False(t, errors.Is(err, os.ErrDeadlineExceeded), "connection %d neither answered nor closed", len(answered)+refused)
		refused++
		_ = c.Close()
	}
	return answered, refused
}

// closedByServer waits until every conn is closed by the server (a read
// returns EOF or a reset) and returns how many were, by within.
func closedByServer(conns []net.Conn, within time.Duration) int {
	closed := 0
	deadline := time.Now().Add(within)
	for _, c := range conns {
		_ = c.SetReadDeadline(deadline)
		if _, err := c.Read(make([]byte, 1)); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			closed++
		}
	}
	return closed
}

// memory is the process's Go heap in use and its resident set, in MiB.
func memory() (heap, rss float64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heap = float64(ms.HeapInuse+ms.StackInuse) / (1 << 20)
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
				kb, _ := strconv.ParseFloat(f[1], 64)
				rss = kb / 1024
			}
		}
	}
	return heap, rss
}

// TestIdleConnectionsBounded is the idle-connection probe of issue 35 on
// the aggregator's own metrics listener (delegated auth: a request without
// a token gets 401, as from any pod): connections over
// --http-max-conns-per-peer from one address are closed at once and
// counted, the answered ones are closed after --http-idle-timeout, and a
// connection over --http-max-conns waits unanswered until a slot frees.
// Before, the servers set only ReadHeaderTimeout: every connection was
// answered and stayed open. The memory the probe costs (this process holds
// both ends) is logged, beside the same probe on a server built as before.
func TestIdleConnectionsBounded(t *testing.T) {
	const n, perPeer, idle = 400, 50, time.Second
	cfg := testConfig(t, "idle-probe")
	cfg.Adapters = false
	cfg.MetricsAuth = config.MetricsAuthDelegated
	cfg.HTTPLimits.IdleTimeout = idle
	cfg.HTTPLimits.MaxConnsPerPeer = perPeer
	cfg.HTTPLimits.MaxConns = 2 * perPeer
	require.NoError(t, cfg.Validate())
	// No apiserver: a request without a token is refused before any review.
	a, err := New(cfg, zap.NewNop(), Options{RestConfig: &rest.Config{Host: "http://127.0.0.1:1"}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	// The baseline: the same probe on a server built as the aggregator's
	// were before (ReadHeaderTimeout only, no connection bound).
	oldLis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	old := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "unauthenticated", http.StatusUnauthorized)
	})}
	go func() { _ = old.Serve(oldLis) }()
	t.Cleanup(func() { _ = old.Close() })
	heap0, rss0 := memory()
	oldConns, oldRefused := probeConns(t, "127.0.0.2", oldLis.Addr().String(), n)
	heap1, rss1 := memory()
	oldClosed := closedByServer(oldConns, 3*idle)
	t.Logf("before (ReadHeaderTimeout only): %d connections from one address, %d answered, %d refused; heap+stacks %+.1f MiB, RSS %+.1f MiB (both ends); %d closed by the server after %s",
		n, len(oldConns), oldRefused, heap1-heap0, rss1-rss0, oldClosed, 3*idle)
	for _, c := range oldConns {
		_ = c.Close()
	}
	_ = old.Close()
	time.Sleep(200 * time.Millisecond)

	heap0, rss0 = memory()
	answered, refused := probeConns(t, "127.0.0.2", a.MetricsAddr(), n)
	heap1, rss1 = memory()
	assert.Equal(t, perPeer, len(answered), "connections answered from one address")
	assert.Equal(t, n-perPeer, refused, "connections closed at accept")
	assert.Equal(t, float64(n-perPeer), metrictest.Value(t, a.reg, "cozy_health_http_connections_rejected_total", "listener", "metrics", "reason", reasonTooManyConnections))
	// Another address is not refused for the first one's connections.
	other, otherRefused := probeConns(t, "127.0.0.3", a.MetricsAddr(), 1)
	assert.Len(t, other, 1)
	assert.Zero(t, otherRefused)
	start := time.Now()
	closed := closedByServer(answered, 3*idle)
	t.Logf("after (--http-max-conns-per-peer=%d, --http-idle-timeout=%s): %d connections from one address, %d answered, %d refused; heap+stacks %+.1f MiB, RSS %+.1f MiB (both ends); %d closed by the server within %s",
		perPeer, idle, n, len(answered), refused, heap1-heap0, rss1-rss0, closed, time.Since(start).Round(10*time.Millisecond))
	assert.Equal(t, len(answered), closed, "idle connections closed by the server after --http-idle-timeout")

	// --http-max-conns: connections past it wait; one closing lets the
	// next in. Idle ones are closed after the idle timeout, so the wait
	// ends then at the latest.
	require.Eventually(t, func() bool {
		return metrictest.Value(t, a.reg, "cozy_health_http_connections", "listener", "metrics") == 0
	}, 5*time.Second, 50*time.Millisecond)
	var held []net.Conn
	for i := range 2 * perPeer {
		c, err := net.DialTCP("tcp", &net.TCPAddr{IP: net.ParseIP(fmt.Sprintf("127.0.1.%d", 1+i/perPeer))}, net.TCPAddrFromAddrPort(mustAddrPort(t, a.MetricsAddr())))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		held = append(held, c)
	}
	require.Eventually(t, func() bool {
		return metrictest.Value(t, a.reg, "cozy_health_http_connections", "listener", "metrics") == float64(2*perPeer)
	}, 5*time.Second, 20*time.Millisecond)
	late, err := net.Dial("tcp", a.MetricsAddr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = late.Close() })
	_, err = io.WriteString(late, "GET /metrics HTTP/1.1\r\nHost: aggregator\r\n\r\n")
	require.NoError(t, err)
	_ = late.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	_, err = late.Read(make([]byte, 1))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "a connection over --http-max-conns is not served")
	_ = held[0].Close()
	_ = late.SetReadDeadline(time.Now().Add(5 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(late), nil)
	require.NoError(t, err, "served once a slot is free")
	_ = res.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, res.StatusCode)
}

func mustAddrPort(t *testing.T, addr string) netip.AddrPort {
	t.Helper()
	ap, err := netip.ParseAddrPort(addr)
	require.NoError(t, err)
	return ap
}

// startMetricsTLS runs a replica with --metrics-tls and no apiserver
// (nothing it serves on the metrics port needs one) until the test ends.
func startMetricsTLS(t *testing.T, identity string) (*App, config.Config) {
	t.Helper()
	cfg := testConfig(t, identity)
	cfg.Adapters = false
	cfg.MetricsTLS = true
	require.NoError(t, cfg.Validate())
	a, err := New(cfg, zap.NewNop(), Options{RestConfig: &rest.Config{Host: "http://127.0.0.1:1"}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return a, cfg
}

// TestMetricsOverTLS: with --metrics-tls the metrics listener serves
// /metrics over TLS with the serving certificate, verified with its CA;
// plain HTTP gets no answer. The probes stay plain HTTP on --http-addr.
// Before, /metrics (and the scraper's token) went over plain HTTP only.
func TestMetricsOverTLS(t *testing.T) {
	a, cfg := startMetricsTLS(t, "metrics-tls")
	tc, err := tlsutil.ClientConfig(filepath.Join(filepath.Dir(cfg.TLSCert), "ca.crt"), "localhost")
	require.NoError(t, err)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 10 * time.Second}
	res, err := client.Get("https://" + a.MetricsAddr() + "/metrics")
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	assert.Equal(t, http.StatusOK, res.StatusCode)
	assert.Contains(t, string(body), "cozy_health_http_connections")

	plain := &http.Client{Timeout: 5 * time.Second}
	if res, err := plain.Get("http://" + a.MetricsAddr() + "/metrics"); err == nil {
		_ = res.Body.Close()
		assert.NotEqual(t, http.StatusOK, res.StatusCode, "plain HTTP is not served /metrics")
	}
	res, err = plain.Get("http://" + a.HTTPAddr() + "/healthz")
	require.NoError(t, err)
	_ = res.Body.Close()
	assert.Equal(t, http.StatusOK, res.StatusCode, "the probes stay plain HTTP")
}

package app

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/cozystack/cozy-health/agent/internal/config"
)

// TestPprofOnlyWithTheFlag: /debug/pprof/ is served on the metrics address
// with --pprof only, and the agent's loops carry their profile labels
// (part=runner, part=metrics) in it.
func TestPprofOnlyWithTheFlag(t *testing.T) {
	for _, on := range []bool{false, true} {
		addr := startAgent(t, on)
		code, body := get(t, "http://"+addr+"/debug/pprof/goroutine?debug=1")
		if !on {
			assert.Equal(t, http.StatusNotFound, code, "without --pprof")
			continue
		}
		require.Equal(t, http.StatusOK, code)
		assert.Contains(t, body, `# labels: {"part":"runner"}`)
		assert.Contains(t, body, `# labels: {"part":"metrics"}`)
	}
}

// startAgent runs the agent with every source off but the fsync probe,
// serving metrics on a free loopback port, until the test ends.
func startAgent(t *testing.T, pprof bool) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	args := []string{"--node-name", "n1", "--metrics-addr", addr, "--talosconfig", "", "--etcd-metrics-url", "", "--cilium-socket", "", "--cilium-health-socket", "",
		"--ovs-db-socket", "", "--ovn-nb-ctl", "", "--ovn-sb-ctl", "", "--fsync-probe-dir", t.TempDir(), "--proc-root", "", "--drbdsetup", "", "--kube-api-token-file", ""}
	if pprof {
		args = append(args, "--pprof")
	}
	cfg, err := config.Load("run", args, io.Discard)
	require.NoError(t, err)
	a, err := New(cfg, zaptest.NewLogger(t))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
		require.NoError(t, a.Close())
	})
	require.Eventually(t, func() bool {
		code, _ := get(t, "http://"+addr+"/healthz")
		return code == http.StatusOK
	}, 10*time.Second, 20*time.Millisecond, "metrics server up")
	return addr
}

func get(t *testing.T, url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

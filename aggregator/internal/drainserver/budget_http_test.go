package drainserver

import (
	"encoding/json"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/cozystack/cozy-health/aggregator/internal/drain"
	"github.com/cozystack/cozy-health/pkg/drainapi"
	"github.com/cozystack/cozy-health/pkg/report"
)

// The budget over HTTP and through the plugin: with node-1's etcd member
// down, losing node-2 or node-3 next would break etcd's quorum, and node-1
// (already lost) is safe; every answer is the last evaluation, none is
// computed for the request.
func TestBudgetOverHTTPAndPlugin(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	st, source, calls := stateCluster(t0)
	svc, err := NewService(Config{Generation: st.Generation}, source, clk, nil, nil)
	require.NoError(t, err)
	b, err := NewBudget(svc, nil)
	require.NoError(t, err)
	mux := http.NewServeMux()
	NewBudgetHandler(b, nil).Mount(mux)
	NewHandler(svc, nil).Mount(mux)
	base := serveMux(t, mux)

	resp, err := http.Get(base + drainapi.BudgetPath)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "before the first evaluation")

	st.Accept(memberReport("node-1", 2, report.StatusDown), t0)
	b.Update()
	first := b.Latest()
	before := calls.Load()
	for i := 0; i < 3; i++ {
		code, body := get(t, base+drainapi.BudgetPath, "")
		require.Equal(t, http.StatusOK, code, body)
	}
	assert.Equal(t, before, calls.Load(), "serving the budget takes no snapshot")

	resp, err = http.Get(base + drainapi.BudgetPath)
	require.NoError(t, err)
	var got drainapi.Budget
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
	resp.Body.Close()
	assert.Equal(t, t0, got.EvaluatedAt.UTC())
	assert.Equal(t, drain.IntentReboot, got.Intent)
	require.Len(t, got.Nodes, 3)
	assert.Equal(t, []string{"node-1", "node-2", "node-3"}, []string{got.Nodes[0].Node, got.Nodes[1].Node, got.Nodes[2].Node})
	assert.Equal(t, drain.Safe, got.Nodes[0].Verdict)
	assert.Empty(t, got.Nodes[0].Breaks)
	for _, n := range got.Nodes[1:] {
		assert.Equal(t, drain.Blocked, n.Verdict)
		require.Len(t, n.Breaks, 1)
		assert.Equal(t, drain.RuleEtcdQuorum, n.Breaks[0].Rule)
		assert.Contains(t, n.Breaks[0].Message, "node-1 Down")
	}

	// Gen moves only when a verdict does.
	clk.Step(5 * time.Second)
	b.Update()
	assert.Equal(t, first.Gen, b.Latest().Gen)
	st.Accept(memberReport("node-1", 3, report.StatusHealthy), clk.Now())
	b.Update()
	assert.NotEqual(t, first.Gen, b.Latest().Gen)
	st.Accept(memberReport("node-1", 4, report.StatusDown), clk.Now())
	b.Update()

	resp, err = http.Post(base+drainapi.BudgetPath, "application/json", nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	assert.Equal(t, 1.0, testutil.ToFloat64(svc.m.rejected.WithLabelValues("budget", "method")))

	code, out, errOut := runPlugin(t, "budget", "--aggregator-url", base)
	require.Equal(t, 0, code, errOut)
	t.Log("\n" + out)
	assert.Regexp(t, `NODE\s+VERDICT\s+LOSING IT NEXT WOULD BREAK`, out)
	assert.Regexp(t, `node-1\s+safe\s+-`, out)
	assert.Regexp(t, `node-2\s+blocked\s+etcd quorum`, out)
	assert.Regexp(t, `node-3\s+blocked\s+etcd quorum`, out)
	assert.Contains(t, out, "3 node(s): 1 safe, 2 blocked, 0 unknown")

	code, out, errOut = runPlugin(t, "budget", "--aggregator-url", base, "-o", "json")
	require.Equal(t, 0, code, errOut)
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	assert.Len(t, got.Nodes, 3)
}

// serveMux serves mux on a loopback listener and returns its base URL.
func serveMux(t testing.TB, mux *http.ServeMux) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

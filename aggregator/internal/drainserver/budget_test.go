package drainserver

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/cozystack/cozy-health/aggregator/internal/drain"
	"github.com/cozystack/cozy-health/pkg/report"
)

// verdictExposition is cozy_health_drain_verdict as a scrape shows it
// for verdicts: three series a node, 1 for its verdict, 0 for the others.
func verdictExposition(verdicts map[string]drain.Verdict) string {
	var b strings.Builder
	b.WriteString("# HELP cozy_health_drain_verdict The drain verdict (reboot) of every node, computed continuously: 1 for the node's current verdict (safe, blocked, unknown), 0 for the others.\n")
	b.WriteString("# TYPE cozy_health_drain_verdict gauge\n")
	nodes := make([]string, 0, len(verdicts))
	for n := range verdicts {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	for _, n := range nodes {
		for _, v := range []drain.Verdict{drain.Blocked, drain.Safe, drain.Unknown} {
			val := 0
			if verdicts[n] == v {
				val = 1
			}
			fmt.Fprintf(&b, "cozy_health_drain_verdict{node=%q,verdict=%q} %d\n", n, v, val)
		}
	}
	return b.String()
}

// The budget exports every node's verdict, 1 for the current one: a
// healthy 3-member etcd lets any one node go; with node-1's member down,
// node-2 and node-3 are blocked and node-1 (already lost) is safe.
func TestBudgetExportsEveryNodesVerdict(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	st, source, _ := stateCluster(t0)
	svc, err := NewService(Config{Generation: st.Generation}, source, clk, nil, nil)
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	b, err := NewBudget(svc, reg)
	require.NoError(t, err)

	got := b.Update()
	require.Len(t, got, 3)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(verdictExposition(map[string]drain.Verdict{
		"node-1": drain.Safe, "node-2": drain.Safe, "node-3": drain.Safe})), "cozy_health_drain_verdict"))

	st.Accept(memberReport("node-1", 2, report.StatusDown), t0)
	got = b.Update()
	assert.Equal(t, drain.Safe, got["node-1"].Verdict)
	assert.Equal(t, drain.Blocked, got["node-2"].Verdict)
	assert.Equal(t, drain.Blocked, got["node-3"].Verdict)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(verdictExposition(map[string]drain.Verdict{
		"node-1": drain.Safe, "node-2": drain.Blocked, "node-3": drain.Blocked})), "cozy_health_drain_verdict"))
	// A node gone from the state loses its series at once; the evaluation
	// Latest serves is not changed under its readers.
	latest := b.Latest()
	b.Removed("node-3")
	assert.Contains(t, latest.Results, "node-3")
	n, err := testutil.GatherAndCount(reg, "cozy_health_drain_verdict")
	require.NoError(t, err)
	assert.Equal(t, 6, n)

	// The budget keeps each verdict's blocked and unknown reasons, and
	// only those: drain-check's own answer has the safe ones too.
	now := clk.Now()
	for node, r := range got {
		full := drain.Evaluate(node, svc.Snapshot(now), now)
		assert.Equal(t, full.Verdict, r.Verdict, node)
		var want []drain.Reason
		for _, x := range full.Reasons {
			if x.Verdict != drain.Safe {
				want = append(want, x)
			}
		}
		assert.Equal(t, want, r.Reasons, node)
		assert.Less(t, len(r.Reasons), len(full.Reasons), "%s: its safe reasons are dropped", node)
	}
	assert.NotEmpty(t, got["node-2"].Reasons, "a blocked node keeps why")
}

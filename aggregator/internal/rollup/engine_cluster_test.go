package rollup

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/cozystack/cozy-health/aggregator/internal/metrics"
	"github.com/cozystack/cozy-health/aggregator/internal/state"
	"github.com/cozystack/cozy-health/pkg/linstorapi"
	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/pkg/report/reporttest"
)

// TestEngineMergesTheLinstorView: the engine merges the facts read
// centrally into linstor at every evaluation; an unchanged state is retimed
// only while those facts are unchanged too (a new read, or facts going
// stale, recompute), and a retimed linstor is never fresher than its
// central read.
func TestEngineMergesTheLinstorView(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	m, err := metrics.New(prometheus.NewRegistry())
	require.NoError(t, err)
	st := state.New(m)
	eng := NewEngine(st, Config{DefaultInterval: 5 * time.Second, FreshForMultiple: 6}, Holds{}, 0, testNS, m, m, clk, zap.NewNop())
	var cf *ClusterFacts
	read := func(gen uint64, status string) {
		nodes := []linstorapi.Node{{Name: "a", Type: "SATELLITE", ConnectionStatus: status}, {Name: "b", Type: "SATELLITE", ConnectionStatus: "ONLINE"}}
		cf = &ClusterFacts{Component: report.ComponentLinstor, Type: "LinstorController", Gen: gen,
			ObservedAt: clk.Now(), FreshUntil: clk.Now().Add(30 * time.Second), Nodes: linstorapi.Observations(nodes, nil, nil)}
	}
	eng.SetCluster(func(time.Time) *ClusterFacts { return cf })
	report1 := func(seq uint64) {
		st.Accept(reporttest.Disk("a", seq, clk.Now(), report.StatusHealthy), clk.Now())
		st.Accept(reporttest.Disk("b", seq, clk.Now(), report.StatusHealthy), clk.Now())
	}

	read(1, "ONLINE")
	report1(1)
	out := eng.Evaluate()
	assert.Equal(t, report.StatusHealthy, out[report.ComponentLinstor].Overall)
	assert.Equal(t, clk.Now(), out[report.ComponentLinstor].ObservedAt)

	// The agents report the same again (the retimed path); the central
	// read is older now: linstor is as old as it.
	readAt := clk.Now()
	clk.Step(5 * time.Second)
	report1(2)
	out = eng.Evaluate()
	assert.Equal(t, report.StatusHealthy, out[report.ComponentLinstor].Overall)
	assert.Equal(t, readAt, out[report.ComponentLinstor].ObservedAt, "never fresher than the central read")
	assert.Equal(t, readAt.Add(30*time.Second), out[report.ComponentLinstor].FreshUntil)
	assert.Equal(t, clk.Now(), out[report.ComponentDisk].ObservedAt)

	// A new read sees a's satellite OFFLINE; the agents' reports judge the
	// same: recomputed, not retimed.
	read(2, "OFFLINE")
	clk.Step(5 * time.Second)
	report1(3)
	out = eng.Evaluate()
	assert.Equal(t, report.StatusDegraded, out[report.ComponentLinstor].Overall)
	assert.Equal(t, report.StatusDown, out[report.ComponentLinstor].Nodes["a"].Status)

	// No new read for 30 s: the same facts go stale: Unknown, recomputed.
	for i := uint64(4); i < 12; i++ {
		clk.Step(5 * time.Second)
		report1(i)
		out = eng.Evaluate()
	}
	assert.False(t, cf.Fresh(clk.Now()))
	assert.Equal(t, report.StatusUnknown, out[report.ComponentLinstor].Overall)
	assert.Equal(t, ReasonCentralStale, out[report.ComponentLinstor].Reason)
}

package rollup

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/cozystack/cozy-health/aggregator/internal/metrics"
	"github.com/cozystack/cozy-health/aggregator/internal/state"
	"github.com/cozystack/cozy-health/pkg/metrictest"
	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/pkg/report/reporttest"
)

const testNS = "cozy-system"

// TestHeartbeatExpiryWithFakeClock drives the whole rollup path (state ->
// Compute -> damping -> compaction -> metrics) on a fake clock.
func TestHeartbeatExpiryWithFakeClock(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	st := state.New(m)
	eng := NewEngine(st, Config{DefaultInterval: 5 * time.Second, FreshForMultiple: 6}, Holds{Degraded: 10 * time.Second}, 0, testNS, m, m, clk, zap.NewNop())

	st.Accept(reporttest.Disk("a", 1, clk.Now(), report.StatusHealthy), clk.Now())
	st.Accept(reporttest.Disk("b", 1, clk.Now(), report.StatusHealthy), clk.Now())
	out := eng.Evaluate()
	require.Equal(t, report.StatusHealthy, out[report.ComponentDisk].Overall)

	// b keeps reporting, a goes silent. At 15 s (the grace, 3 x 5 s) a is
	// still fresh; just past it every entry of a is Unknown/HeartbeatMissed.
	for i := 1; i <= 3; i++ {
		clk.Step(5 * time.Second)
		st.Accept(reporttest.Disk("b", uint64(1+i), clk.Now(), report.StatusHealthy), clk.Now())
	}
	out = eng.Evaluate()
	assert.Equal(t, report.StatusHealthy, out[report.ComponentDisk].Nodes["a"].Status, "at exactly the grace a is fresh")
	clk.Step(time.Millisecond)
	out = eng.Evaluate()
	for _, comp := range []string{report.ComponentDisk, report.ComponentNode} {
		ns := out[comp].Nodes["a"]
		assert.Equal(t, report.StatusUnknown, ns.Status, comp)
		assert.Equal(t, report.ReasonHeartbeatMissed, ns.Reason, comp)
		assert.Equal(t, clk.Now().Add(-15*time.Second-time.Millisecond), ns.LastReportAt, comp)
		assert.Equal(t, report.StatusUnknown, out[comp].Overall, "Unknown is published at once (no damping by default)")
		assert.Equal(t, []string{"a"}, out[comp].DegradedNodes)
	}
	assert.Equal(t, 1.0, testutil.ToFloat64(gauge(t, reg, "cozy_health_node_status", map[string]string{"node": "a", "component": "disk", "status": "Unknown"})))
	assert.Equal(t, 1.0, testutil.ToFloat64(gauge(t, reg, "cozy_health_component_status", map[string]string{"namespace": "cozy-system", "component": "disk", "status": "Unknown"})))

	// a comes back: recovery is published at once.
	st.Accept(reporttest.Disk("a", 2, clk.Now(), report.StatusHealthy), clk.Now())
	out = eng.Evaluate()
	assert.Equal(t, report.StatusHealthy, out[report.ComponentDisk].Overall)

	// A Degraded disk on b is held for 10 s, then published.
	clk.Step(time.Second)
	st.Accept(reporttest.Disk("b", 10, clk.Now(), report.StatusDegraded), clk.Now())
	assert.Equal(t, report.StatusHealthy, eng.Evaluate()[report.ComponentDisk].Overall)
	clk.Step(9 * time.Second)
	st.Accept(reporttest.Disk("a", 3, clk.Now(), report.StatusHealthy), clk.Now())
	st.Accept(reporttest.Disk("b", 11, clk.Now(), report.StatusDegraded), clk.Now())
	assert.Equal(t, report.StatusHealthy, eng.Evaluate()[report.ComponentDisk].Overall)
	clk.Step(time.Second)
	out = eng.Evaluate()
	assert.Equal(t, report.StatusDegraded, out[report.ComponentDisk].Overall)
	assert.Equal(t, report.StatusDegraded, out[report.ComponentDisk].Nodes["b"].Status)

	// Pruning a node removes it from the rollup and its metric label sets.
	st.DeleteNode("b")
	out = eng.Evaluate()
	assert.NotContains(t, out[report.ComponentDisk].Nodes, "b")
	text := scrape(t, reg)
	assert.NotContains(t, text, `node="b"`)
	assert.Contains(t, text, `node="a"`)
	// A report of a deleted node still in flight does not resurrect it.
	st.Accept(reporttest.Disk("b", 12, clk.Now(), report.StatusHealthy), clk.Now())
	_, ok := st.Get("b")
	assert.False(t, ok)
}

// sample is the first sample of metric name whose labels include labels.
func sample(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	m := metrictest.Lookup(t, reg, name, metrictest.Pairs(labels)...)
	require.NotNil(t, m, "no %s%v", name, labels)
	return m
}

func gauge(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) prometheus.Collector {
	t.Helper()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "x"})
	g.Set(sample(t, reg, name, labels).GetGauge().GetValue())
	return g
}

func counter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	return sample(t, reg, name, labels).GetCounter().GetValue()
}

func scrape(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var b strings.Builder
	for _, mf := range mfs {
		_, err := expfmt.MetricFamilyToText(&b, mf)
		require.NoError(t, err)
	}
	return b.String()
}

// TestEngineRetimeEqualsRecompute runs two engines on one state through a
// random history (reports that judge the same with new numbers in their
// messages, reports that change a status, silences past the grace, nodes
// deleted, nodes Kubernetes lists that never reported, Degraded holds): the engine that retimes when nothing judged
// changed (comparing only the nodes changed since its last evaluation,
// while no fresh node can have turned stale) publishes exactly what the
// engine that always recomputes does.
func TestEngineRetimeEqualsRecompute(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	st := state.New(nil)
	cfg := Config{DefaultInterval: 5 * time.Second, FreshForMultiple: 6}
	holds := Holds{Degraded: 10 * time.Second}
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	retiming := NewEngine(st, cfg, holds, 3, testNS, m, m, clk, zap.NewNop())
	full := NewEngine(st, cfg, holds, 3, testNS, nil, nil, clk, zap.NewNop())
	// The reference: no memo at all, every evaluation folds every report.
	full.alwaysRecompute, full.cache = true, nil

	rng := rand.New(rand.NewPCG(1, 2))
	nodes := []string{"n0", "n1", "n2", "n3", "n4", "n5"}
	seq := map[string]uint64{}
	statuses := []report.Status{report.StatusHealthy, report.StatusHealthy, report.StatusHealthy, report.StatusDegraded, report.StatusDown, report.StatusUnknown}
	disk := map[string]report.Status{}
	silent := map[string]bool{}
	send := func(n string) {
		seq[n]++
		r := reporttest.Disk(n, seq[n], clk.Now(), disk[n])
		// New numbers in the messages every time, as real agents send; one
		// reason for every status, so only the status tells a change.
		for i := range r.Observations {
			r.Observations[i].Message = fmt.Sprintf("p99 %d.%03dms", rng.IntN(9), rng.IntN(1000))
			r.Observations[i].Reason = "Probed"
		}
		st.Accept(r, clk.Now())
	}
	for _, n := range nodes {
		disk[n] = report.StatusHealthy
		send(n)
	}
	for step := range 600 {
		switch p := rng.IntN(100); {
		case p < 60: // a round of reports
			for _, n := range nodes {
				if !silent[n] && rng.IntN(3) > 0 {
					send(n)
				}
			}
		case p < 70: // a status changes
			n := nodes[rng.IntN(len(nodes))]
			disk[n] = statuses[rng.IntN(len(statuses))]
			send(n)
		case p < 78: // a node goes silent, or speaks again
			n := nodes[rng.IntN(len(nodes))]
			silent[n] = !silent[n]
		case p < 80: // a node is deleted, or created again
			n := nodes[rng.IntN(len(nodes))]
			if _, ok := st.Get(n); ok {
				st.DeleteNode(n)
			} else {
				st.Restore(n)
				if rng.IntN(2) == 0 {
					send(n)
				} else {
					// Kubernetes lists it; its agent has not reported yet.
					st.Expect(n, clk.Now())
				}
			}
		case p < 82: // a node Kubernetes lists with an agent never heard
			st.Expect("k8s-only", clk.Now())
		case p < 84:
			st.Unexpect("k8s-only")
		}
		clk.Step(time.Duration(rng.IntN(4000)) * time.Millisecond)
		got, want := retiming.Evaluate(), full.Evaluate()
		require.Equal(t, want, got, "step %d", step)
	}
	// The history must have exercised both paths.
	retimed := counter(t, reg, "cozy_health_rollups_total", map[string]string{"kind": metrics.RollupRetimed})
	recomputed := counter(t, reg, "cozy_health_rollups_total", map[string]string{"kind": metrics.RollupFull})
	t.Logf("%v retimed (%d from the changed nodes alone), %v recomputed", retimed, retiming.cache.incremental, recomputed)
	assert.Greater(t, retimed, 100.0, "retimed evaluations")
	assert.Greater(t, retiming.cache.incremental, 50, "retimed evaluations that compared only the changed nodes")
	assert.Greater(t, recomputed, 100.0, "recomputed evaluations")
}

// TestRunEvaluatesAtTheHeartbeatDeadline: with a period far longer than
// the grace, a silent node still reads Unknown at its deadline.
func TestRunEvaluatesAtTheHeartbeatDeadline(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	st := state.New(nil)
	eng := NewEngine(st, Config{DefaultInterval: 5 * time.Second, FreshForMultiple: 6}, Holds{}, 0, testNS, nil, nil, clk, zap.NewNop())
	st.Accept(reporttest.Disk("a", 1, clk.Now(), report.StatusHealthy), clk.Now())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); eng.Run(ctx, time.Hour) }()
	defer func() { cancel(); <-done }()

	disk := func() report.Status {
		if l := eng.Latest(); l != nil {
			return l[report.ComponentDisk].Nodes["a"].Status
		}
		return report.StatusDown
	}
	require.Eventually(t, func() bool { return disk() == report.StatusHealthy }, 5*time.Second, time.Millisecond)
	require.Eventually(t, clk.HasWaiters, 5*time.Second, time.Millisecond)
	clk.Step(15 * time.Second)
	time.Sleep(50 * time.Millisecond)
	assert.Equal(t, report.StatusHealthy, disk(), "at exactly the grace a is fresh")
	clk.Step(time.Nanosecond)
	require.Eventually(t, func() bool { return disk() == report.StatusUnknown }, 5*time.Second, time.Millisecond,
		"the deadline, not the hour-long period, brings the next rollup")
}

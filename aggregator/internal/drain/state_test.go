package drain_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/aggregator/internal/drain"
	"github.com/cozystack/cozy-health/aggregator/internal/rollup"
	"github.com/cozystack/cozy-health/aggregator/internal/state"
	"github.com/cozystack/cozy-health/pkg/report"
)

func etcdReport(node string, seq uint64) *report.NodeReport {
	return &report.NodeReport{NodeName: node, AgentInstanceID: "agent-" + node, Sequence: seq, Interval: time.Second,
		Observations: []report.Observation{
			{Component: report.ComponentEtcd, Check: report.CheckEtcdMember, Status: report.StatusHealthy, Reason: "MemberHealthy", Attributes: map[string]float64{report.AttrIsLearner: 0}},
		}}
}

// TestStateNodes pins the state's view: heartbeat grace as the rollup
// judges it (fresh at exactly the grace, stale past it), Kubernetes Nodes
// merged in, nodes only one side knows kept.
func TestStateNodes(t *testing.T) {
	st := state.New(nil)
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	st.Accept(etcdReport("node-1", 1), t0)
	st.Accept(etcdReport("gone-1", 1), t0.Add(-time.Minute))
	grace := rollup.Config{DefaultInterval: 5 * time.Second}.Grace // reports say 1s: grace 3s

	nodes := drain.StateNodes(st, t0.Add(3*time.Second), map[string]drain.KubeNode{"node-1": {}, "worker-1": {Cordoned: true}}, grace)
	require.Len(t, nodes, 3)
	n1 := nodes["node-1"]
	assert.True(t, n1.Exists)
	assert.False(t, n1.Cordoned)
	assert.True(t, n1.Fresh, "fresh at exactly the grace, as the rollup judges it")
	assert.Equal(t, t0.Add(3*time.Second), n1.FreshUntil)
	assert.Equal(t, t0, n1.LastHeard)
	require.NotNil(t, n1.LastReport)
	assert.Equal(t, "node-1", n1.LastReport.NodeName)

	w := nodes["worker-1"]
	assert.True(t, w.Exists)
	assert.True(t, w.Cordoned)
	assert.Nil(t, w.LastReport)

	g := nodes["gone-1"]
	assert.False(t, g.Exists, "in the state but not a Kubernetes Node")
	assert.False(t, g.Fresh)

	nodes = drain.StateNodes(st, t0.Add(3*time.Second+time.Millisecond), nil, grace)
	assert.False(t, nodes["node-1"].Fresh, "stale past the grace")
	assert.False(t, nodes["node-1"].Exists)

	// A Node Kubernetes lists whose agent never reported: the drain check
	// sees a Node with no data, as for one the state never held.
	st.Expect("silent-1", t0)
	nodes = drain.StateNodes(st, t0, map[string]drain.KubeNode{"silent-1": {}}, grace)
	s := nodes["silent-1"]
	assert.True(t, s.Exists)
	assert.False(t, s.Fresh)
	assert.Nil(t, s.LastReport)
	assert.True(t, s.LastHeard.IsZero())
}

// TestStateGenerationCountsEveryChange pins what the drain check's
// freshness (Config.Generation) relies on: every change of what StateNodes
// reads moves the state's generation, and what the state refuses or
// already holds does not.
func TestStateGenerationCountsEveryChange(t *testing.T) {
	st := state.New(nil)
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	g := st.Generation()
	moved := func(what string) {
		t.Helper()
		assert.Greater(t, st.Generation(), g, what)
		g = st.Generation()
	}
	still := func(what string) {
		t.Helper()
		assert.Equal(t, g, st.Generation(), what)
	}
	st.Accept(etcdReport("node-1", 1), t0)
	moved("a report accepted")
	st.Accept(etcdReport("node-1", 2), t0)
	moved("the next report")
	st.Accept(etcdReport("node-1", 2), t0)
	still("a replayed report is refused")
	st.Expect("node-2", t0)
	moved("a node expected")
	st.Expect("node-2", t0)
	still("already expected")
	st.SetRole("node-1", state.RoleControlPlane)
	moved("a role")
	st.SetRole("node-1", state.RoleControlPlane)
	still("the same role")
	st.Unexpect("node-2")
	moved("a node no longer expected")
	st.DeleteNode("node-1")
	moved("a node pruned")
	st.Accept(etcdReport("node-1", 3), t0)
	still("a report of a pruned node is refused")
}

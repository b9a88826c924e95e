package rollup

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/aggregator/internal/status"
	"github.com/cozystack/cozy-health/pkg/report"
)

func observationOf(cs *status.Component) *status.Condition {
	for i := range cs.Conditions {
		if c := &cs.Conditions[i]; c.Type == TypeObservation && c.Node == "" {
			return c
		}
	}
	return nil
}

// TestReplicaPartitioned: a node this replica holds only through a peer
// keeps its entries as its relayed report says (Healthy, not Unknown), and
// the node component carries one Observation condition, True, reason
// ReplicaPartitioned, naming this replica, the node and the peer; with
// every node heard directly there is none.
func TestReplicaPartitioned(t *testing.T) {
	cfg := Config{DefaultInterval: 5 * time.Second, FreshForMultiple: 6, Replica: "aggregator-0"}
	ok := ob(report.ComponentNode, report.CheckTalosServices, H, "ServicesRunning")
	a, b, c := node("a", time.Second, ok), node("b", 2*time.Second, ok), node("c", time.Second, ok)
	b.Via = "aggregator-1"
	out := Compute(snap(a, b, c), t0, cfg)
	cs := out[report.ComponentNode]
	require.NotNil(t, cs)
	assert.Equal(t, H, cs.Nodes["b"].Status, "the relayed node's entry stays what it said")
	assert.Equal(t, H, cs.Overall)
	cond := observationOf(cs)
	require.NotNil(t, cond)
	assert.Equal(t, ReasonReplicaPartitioned, cond.Reason)
	assert.Equal(t, H, cond.Severity)
	assert.Equal(t, "replica aggregator-0 does not hear 1 node(s) and holds their signed reports as a peer relayed them: b through aggregator-1", cond.Message)
	for _, comp := range report.NodeComponents {
		if comp != report.ComponentNode && out[comp] != nil {
			assert.Nil(t, observationOf(out[comp]), comp)
		}
	}
	Compact(cs, DefaultMaxListed)
	assert.NotNil(t, observationOf(cs), "a component-level condition survives compaction")
	assert.Zero(t, cs.Issues, "the observer's cut path is no issue of the nodes")

	b.Via = ""
	assert.Nil(t, observationOf(Compute(snap(a, b, c), t0, cfg)[report.ComponentNode]), "heard directly: no condition")
}

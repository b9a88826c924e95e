package drain

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/pkg/linstorapi"
	"github.com/cozystack/cozy-health/pkg/report"
)

// TestLinstorRulesOnTheControllerView: the aggregator reads the LINSTOR
// controller itself; the rules read replicas from that view, whatever the
// agents report (they report none: no drbdsetup in the shipped image).
func TestLinstorRulesOnTheControllerView(t *testing.T) {
	nodes := map[string]NodeInfo{"node-1": fresh("node-1"), "node-2": fresh("node-2"), "node-3": fresh("node-3")}
	rep := func(res, node, state string) linstorapi.Replica {
		sat := linstorapi.ConnectionOnline
		if state == "" {
			sat = linstorapi.ConnectionOffline
		}
		return linstorapi.Replica{Resource: res, Node: node, State: state, Diskless: state == "Diskless", Satellite: sat}
	}
	cases := []struct {
		name     string
		reps     []linstorapi.Replica
		why      string
		nodes    map[string]NodeInfo
		target   string
		last     Verdict
		quorum   Verdict
		contains string
	}{
		{name: "two UpToDate and a tie-breaker: safe",
			reps:   []linstorapi.Replica{rep("pvc-a", "node-1", "UpToDate"), rep("pvc-a", "node-2", "UpToDate"), rep("pvc-a", "node-3", "Diskless")},
			target: "node-1", last: Safe, quorum: Safe, contains: "keeps an UpToDate replica elsewhere"},
		{name: "the other replica Outdated: the target holds the last UpToDate one",
			reps:   []linstorapi.Replica{rep("pvc-a", "node-1", "UpToDate"), rep("pvc-a", "node-2", "Outdated"), rep("pvc-a", "node-3", "Diskless")},
			target: "node-1", last: Blocked, quorum: Safe, contains: "node-1 holds the only UpToDate replica of pvc-a"},
		{name: "draining the Outdated one: safe",
			reps:   []linstorapi.Replica{rep("pvc-a", "node-1", "UpToDate"), rep("pvc-a", "node-2", "Outdated"), rep("pvc-a", "node-3", "Diskless")},
			target: "node-2", last: Safe, quorum: Safe},
		{name: "the other replica's satellite offline (no state): unknown, never safe",
			reps:   []linstorapi.Replica{rep("pvc-a", "node-1", "UpToDate"), rep("pvc-a", "node-2", ""), rep("pvc-a", "node-3", "Diskless")},
			target: "node-1", last: Unknown, quorum: Unknown, contains: `node-2 satellite "OFFLINE"`},
		{name: "two replicas, no tie-breaker: draining one loses quorum",
			reps:   []linstorapi.Replica{rep("pvc-a", "node-1", "UpToDate"), rep("pvc-a", "node-2", "UpToDate")},
			target: "node-1", last: Safe, quorum: Blocked, contains: "leaves pvc-a with 1 of 2 replicas connected around an UpToDate copy, quorum needs 2"},
		{name: "a node without replicas: safe, said",
			reps:   []linstorapi.Replica{rep("pvc-a", "node-1", "UpToDate"), rep("pvc-a", "node-2", "UpToDate")},
			target: "node-3", last: Safe, quorum: Safe, contains: "node-3 holds no DRBD resource"},
		{name: "the view not current: unknown, naming why",
			why:    "the LINSTOR controller's view is as last read at 2026-11-30T11:58:00Z: connection refused",
			target: "node-3", last: Unknown, quorum: Unknown, contains: "view is not current (the LINSTOR controller's view is as last read"},
		{name: "the other holder's agent silent: its replica uncertain",
			reps:   []linstorapi.Replica{rep("pvc-a", "node-1", "UpToDate"), rep("pvc-a", "node-2", "UpToDate"), rep("pvc-a", "node-3", "Diskless")},
			nodes:  map[string]NodeInfo{"node-1": fresh("node-1"), "node-2": stale("node-2"), "node-3": fresh("node-3")},
			target: "node-1", last: Unknown, quorum: Unknown, contains: "node-2 stale"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := nodes
			if tc.nodes != nil {
				ns = tc.nodes
			}
			s := NewSnapshot(ns, t0).WithControllerView(mesh(tc.reps), tc.why)
			res := Evaluate(tc.target, s, t0)
			last, q := reasonsOf(res, RuleLinstorLastReplica), reasonsOf(res, RuleLinstorQuorum)
			require.NotEmpty(t, last)
			require.NotEmpty(t, q)
			assert.Equal(t, tc.last, worst(last), "%+v", last)
			assert.Equal(t, tc.quorum, worst(q), "%+v", q)
			if tc.contains != "" {
				var all string
				for _, r := range append(last, q...) {
					all += r.Message + "\n"
				}
				assert.Contains(t, all, tc.contains)
			}
		})
	}

	// An agent's drbd-resource claims do not move the controller's view:
	// node-2 claims an UpToDate replica LINSTOR does not list.
	claimed := map[string]NodeInfo{"node-1": fresh("node-1"), "node-2": fresh("node-2", drbd("pvc-a", report.StatusHealthy, true, false, 2, 2)), "node-3": fresh("node-3")}
	s := NewSnapshot(claimed, t0).WithControllerView([]linstorapi.Replica{rep("pvc-a", "node-1", "UpToDate")}, "")
	assert.Equal(t, Blocked, worst(reasonsOf(Evaluate("node-1", s, t0), RuleLinstorLastReplica)))
}

// mesh connects every replica of each resource to every other, as DRBD
// does when all is well; a replica whose satellite is not ONLINE reports
// no connections (the controller holds no state of it).
func mesh(reps []linstorapi.Replica) []linstorapi.Replica {
	out := make([]linstorapi.Replica, len(reps))
	for i, r := range reps {
		if r.Satellite == linstorapi.ConnectionOnline {
			r.Peers = map[string]string{}
			for _, p := range reps {
				if p.Resource == r.Resource && p.Node != r.Node {
					r.Peers[p.Node] = linstorapi.DRBDConnected
				}
			}
		}
		out[i] = r
	}
	return out
}

func worst(rs []Reason) Verdict {
	v := Safe
	for _, r := range rs {
		if rank(r.Verdict) > rank(v) {
			v = r.Verdict
		}
	}
	return v
}

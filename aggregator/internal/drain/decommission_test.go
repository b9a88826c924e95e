package drain

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/pkg/linstorapi"
	"github.com/cozystack/cozy-health/pkg/report"
)

// What a decommission needs, from first principles: the node never comes
// back, so (a) a raft cluster must not keep a member of it (a member left
// in the configuration counts in every quorum and never votes again), and
// (b) each DRBD resource it holds data of must find another satellite to
// hold that data (its replica count kept). A reboot needs neither.

func verdictOf(t *testing.T, res Result, rule string) []Reason {
	t.Helper()
	rs := reasonsOf(res, rule)
	require.NotEmpty(t, rs, "rule %s said nothing: %+v", rule, res.Reasons)
	return rs
}

func TestIntentRules(t *testing.T) {
	nodes := etcdCluster(3, nil)
	reboot := EvaluateIntent("node-1", IntentReboot, snap(nodes), t0)
	assert.Empty(t, reasonsOf(reboot, RuleRaftMemberRemoved), "a reboot returns the node: its member may stay")
	assert.Empty(t, reasonsOf(reboot, RuleLinstorReplaceable), "a reboot returns the node: its replicas resync")
	assert.Equal(t, Safe, reboot.Verdict)
	assert.Equal(t, IntentReboot, reboot.Intent)

	dec := EvaluateIntent("node-1", IntentDecommission, snap(nodes), t0)
	assert.Equal(t, IntentDecommission, dec.Intent)
	assert.Equal(t, Blocked, dec.Verdict, "node-1 still holds a voting etcd member: %+v", dec.Reasons)
	assert.NotEmpty(t, reasonsOf(dec, RuleEtcdQuorum), "a decommission also needs what a reboot needs")
}

func TestRaftMemberRemovedEtcd(t *testing.T) {
	down := func(n string, size int) NodeInfo {
		obs := []report.Observation{etcdMember(report.StatusDown, false)}
		if size > 0 {
			obs = append(obs, membership(size, 0))
		}
		return fresh(n, obs...)
	}
	up := func(n string, size int) NodeInfo {
		return fresh(n, etcdMember(report.StatusHealthy, false), membership(size, 0))
	}
	cases := []struct {
		name     string
		nodes    map[string]NodeInfo
		target   string
		verdict  Verdict
		contains []string
	}{
		{name: "a healthy voting member: remove it first", nodes: etcdCluster(3, nil), target: "node-3", verdict: Blocked,
			contains: []string{"node-3 still holds a voting member", "remove the member first", "talosctl -n node-3 etcd leave"}},
		{name: "a Degraded member still votes: blocked",
			nodes:  etcdCluster(3, map[string]NodeInfo{"node-3": fresh("node-3", etcdMember(report.StatusDegraded, false), membership(3, 0))}),
			target: "node-3", verdict: Blocked},
		{name: "a learner is still a member: blocked",
			nodes:  etcdCluster(3, map[string]NodeInfo{"node-4": fresh("node-4", etcdMember(report.StatusHealthy, true), membership(3, 1))}),
			target: "node-4", verdict: Blocked, contains: []string{"a learner"}},
		{name: "removed: its etcd stopped, the two others list 2 voting members",
			nodes:  map[string]NodeInfo{"node-1": up("node-1", 2), "node-2": up("node-2", 2), "node-3": down("node-3", 0)},
			target: "node-3", verdict: Safe, contains: []string{"it is removed"}},
		{name: "Down but the others still list 3: a member that is down, not removed",
			nodes:  map[string]NodeInfo{"node-1": up("node-1", 3), "node-2": up("node-2", 3), "node-3": down("node-3", 0)},
			target: "node-3", verdict: Unknown, contains: []string{"not proven"}},
		{name: "Down, one list says 2 and one says 3: no majority",
			nodes:  map[string]NodeInfo{"node-1": up("node-1", 3), "node-2": up("node-2", 2), "node-3": down("node-3", 0)},
			target: "node-3", verdict: Unknown},
		{name: "Down, only one of the two others lists (a quorum of 2 lists needed)",
			nodes:  map[string]NodeInfo{"node-1": up("node-1", 2), "node-2": fresh("node-2", etcdMember(report.StatusHealthy, false)), "node-3": down("node-3", 0)},
			target: "node-3", verdict: Unknown},
		{name: "two Down and the lists count one removed: which one is not known",
			nodes:  map[string]NodeInfo{"node-1": up("node-1", 2), "node-2": down("node-2", 0), "node-3": down("node-3", 0)},
			target: "node-3", verdict: Unknown},
		{name: "Down and another member stale: the stale one may be the removed one",
			nodes: map[string]NodeInfo{"node-1": up("node-1", 3), "node-2": up("node-2", 3), "node-3": up("node-3", 3),
				"node-4": stale("node-4", etcdMember(report.StatusHealthy, false)), "node-5": down("node-5", 0)},
			target: "node-5", verdict: Unknown, contains: []string{"node-4 Unknown"}},
		{name: "a control-plane node without a member observation: unknown",
			nodes:  etcdCluster(3, map[string]NodeInfo{"node-3": fresh("node-3")}),
			target: "node-3", verdict: Unknown},
		{name: "a stale control-plane node: unknown",
			nodes:  etcdCluster(3, map[string]NodeInfo{"node-3": stale("node-3", etcdMember(report.StatusDown, false))}),
			target: "node-3", verdict: Unknown},
		{name: "a worker holds no member",
			nodes: etcdCluster(3, map[string]NodeInfo{"worker-1": fresh("worker-1")}), target: "worker-1", verdict: Safe},
		{name: "a worker's own member claim is not believed, and it holds none",
			nodes: etcdCluster(3, map[string]NodeInfo{"worker-1": fresh("worker-1", etcdMember(report.StatusHealthy, false))}), target: "worker-1", verdict: Safe},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rs := verdictOf(t, EvaluateRules([]Rule{raftMemberRemovedRule{}}, tc.target, snap(tc.nodes), t0), RuleRaftMemberRemoved)
			etcd := rs[0]
			for _, r := range rs {
				if r.Component == report.ComponentEtcd {
					etcd = r
				}
			}
			require.Equal(t, report.ComponentEtcd, etcd.Component)
			assert.Equal(t, tc.verdict, etcd.Verdict, etcd.Message)
			for _, c := range tc.contains {
				assert.Contains(t, etcd.Message, c)
			}
		})
	}
}

func TestRaftMemberRemovedOVN(t *testing.T) {
	nb, sb := "OVN_Northbound", "OVN_Southbound"
	member := func(n string, st report.Status, servers int) NodeInfo {
		return fresh(n, etcdMember(report.StatusHealthy, false), membership(3, 0), ovn(nb, st, servers), ovn(sb, st, servers))
	}
	byDB := func(rs []Reason) map[string]Verdict {
		out := map[string]Verdict{}
		for _, r := range rs {
			if r.Component == report.ComponentKubeOVN && r.ResourceRef != nil {
				out[r.ResourceRef.Name] = r.Verdict
			}
		}
		return out
	}
	all := map[string]NodeInfo{"node-1": member("node-1", report.StatusHealthy, 3), "node-2": member("node-2", report.StatusHealthy, 3), "node-3": member("node-3", report.StatusHealthy, 3)}
	rs := reasonsOf(EvaluateRules([]Rule{raftMemberRemovedRule{}}, "node-3", snap(all), t0), RuleRaftMemberRemoved)
	assert.Equal(t, map[string]Verdict{nb: Blocked, sb: Blocked}, byDB(rs), "node-3 votes in NB and SB: %+v", rs)

	// Its ovn-central left both clusters: it reports no member, the others
	// count 2 servers.
	left := map[string]NodeInfo{"node-1": member("node-1", report.StatusHealthy, 2), "node-2": member("node-2", report.StatusHealthy, 2),
		"node-3": fresh("node-3", etcdMember(report.StatusHealthy, false), membership(3, 0))}
	rs = reasonsOf(EvaluateRules([]Rule{raftMemberRemovedRule{}}, "node-3", snap(left), t0), RuleRaftMemberRemoved)
	assert.Equal(t, map[string]Verdict{nb: Safe, sb: Safe}, byDB(rs), "%+v", rs)

	// No member of node-3, but the others count 3 servers: one member is
	// on no reporting node, it may be node-3's.
	missing := map[string]NodeInfo{"node-1": member("node-1", report.StatusHealthy, 3), "node-2": member("node-2", report.StatusHealthy, 3),
		"node-3": fresh("node-3", etcdMember(report.StatusHealthy, false), membership(3, 0))}
	rs = reasonsOf(EvaluateRules([]Rule{raftMemberRemovedRule{}}, "node-3", snap(missing), t0), RuleRaftMemberRemoved)
	assert.Equal(t, map[string]Verdict{nb: Unknown, sb: Unknown}, byDB(rs), "%+v", rs)

	// kube-ovn not deployed at all: nothing to remove.
	rs = reasonsOf(EvaluateRules([]Rule{raftMemberRemovedRule{}}, "node-3", snap(etcdCluster(3, nil)), t0), RuleRaftMemberRemoved)
	require.Len(t, rs, 2)
	assert.Equal(t, Safe, rs[1].Verdict, rs[1].Message)
	assert.Equal(t, report.ComponentKubeOVN, rs[1].Component)
}

// TestRaftMemberRemovedModel: a cluster of n true members of which at most
// one was really removed (its member no longer runs, the honest members'
// lists count n-1); members may be Down, stale or silent and at most one
// node lies about its list (the trust model: one node cannot make a drain
// safe). The rule may say removed (safe) only of the member truly removed.
func TestRaftMemberRemovedModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(37, 2))
	safe := 0
	for k := 0; k < 5000; k++ {
		n := 3 + 2*rng.IntN(2)
		removed := rng.IntN(n + 1) // n: none removed
		liar := rng.IntN(n + 1)    // n: nobody lies
		inList := n
		if removed < n {
			inList--
		}
		nodes := map[string]NodeInfo{}
		for i := 0; i < n; i++ {
			name := fmt.Sprintf("node-%d", i+1)
			st := report.StatusHealthy
			if i == removed || rng.IntN(5) == 0 {
				st = report.StatusDown
			}
			obs := []report.Observation{etcdMember(st, false)}
			switch {
			case i == liar:
				obs = append(obs, membership(1+rng.IntN(n), 0))
			case i != removed && st == report.StatusHealthy && rng.IntN(4) > 0:
				obs = append(obs, membership(inList, 0))
			}
			switch rng.IntN(8) {
			case 0:
				nodes[name] = stale(name, obs...)
			case 1:
				nodes[name] = silent(name)
			default:
				nodes[name] = fresh(name, obs...)
			}
		}
		s := snap(nodes)
		for i := 0; i < n; i++ {
			name := fmt.Sprintf("node-%d", i+1)
			rs := reasonsOf(EvaluateRules([]Rule{raftMemberRemovedRule{}}, name, s, t0), RuleRaftMemberRemoved)
			if rs[0].Verdict != Safe {
				continue
			}
			safe++
			if i != removed {
				t.Fatalf("draw %d: %s read removed but is a member (removed %d, liar %d): %s; nodes %+v", k, name, removed, liar, rs[0].Message, nodes)
			}
		}
	}
	t.Logf("%d removed members proven removed, none wrongly", safe)
	require.NotZero(t, safe, "the rule never proved a removal: the test proves nothing")
}

// viewOf merges the controller views of several resources, sorted as the
// aggregator's reader returns them.
func viewOf(parts ...[]linstorapi.Replica) []linstorapi.Replica {
	var out []linstorapi.Replica
	for _, p := range parts {
		out = append(out, p...)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Resource != out[j].Resource {
			return out[i].Resource < out[j].Resource
		}
		return out[i].Node < out[j].Node
	})
	return out
}

func TestLinstorReplaceable(t *testing.T) {
	up := []string{"UpToDate"}
	pair := func(t *testing.T, res string, sats map[string]string, a, b string) []linstorapi.Replica {
		return controllerViewOf(t, res, sats,
			viewReplica{node: a, disks: up, peers: map[string]string{b: "Connected"}},
			viewReplica{node: b, disks: up, peers: map[string]string{a: "Connected"}})
	}
	nodes := func(names ...string) map[string]NodeInfo {
		out := map[string]NodeInfo{}
		for _, n := range names {
			out[n] = fresh(n)
		}
		return out
	}
	cases := []struct {
		name     string
		nodes    map[string]NodeInfo
		view     func(t *testing.T) []linstorapi.Replica
		why      string
		target   string
		verdict  Verdict
		contains []string
	}{
		{name: "two nodes, a replica on each: nowhere to re-place it",
			nodes: nodes("node-1", "node-2"), target: "node-1", verdict: Blocked,
			view:     func(t *testing.T) []linstorapi.Replica { return pair(t, "pvc-a", nil, "node-1", "node-2") },
			contains: []string{"no other satellite can take node-1's replica of pvc-a"}},
		{name: "a third satellite ONLINE, its pools not in the view: room unknown",
			nodes: nodes("node-1", "node-2", "node-3"), target: "node-1", verdict: Unknown,
			view: func(t *testing.T) []linstorapi.Replica {
				return viewOf(pair(t, "pvc-a", nil, "node-1", "node-2"), pair(t, "pvc-b", nil, "node-2", "node-3"))
			},
			contains: []string{"node-3 (ONLINE; its storage pools are not known)", "the storage pools are not in the drain's view of LINSTOR"}},
		{name: "the third satellite OFFLINE: cannot take it now",
			nodes: nodes("node-1", "node-2", "node-3"), target: "node-1", verdict: Blocked,
			view: func(t *testing.T) []linstorapi.Replica {
				return viewOf(pair(t, "pvc-a", nil, "node-1", "node-2"), pair(t, "pvc-b", map[string]string{"node-3": "OFFLINE"}, "node-2", "node-3"))
			}},
		{name: "the third node cordoned: it may take it (LINSTOR does not read cordons), not certainly",
			nodes: map[string]NodeInfo{"node-1": fresh("node-1"), "node-2": fresh("node-2"), "node-3": cordoned("node-3")}, target: "node-1", verdict: Unknown,
			view: func(t *testing.T) []linstorapi.Replica {
				return viewOf(pair(t, "pvc-a", nil, "node-1", "node-2"), pair(t, "pvc-b", nil, "node-2", "node-3"))
			},
			contains: []string{"node-3 (cordoned)"}},
		{name: "the third node holds no replica: its satellite and pools are not in the view",
			nodes: nodes("node-1", "node-2", "node-3"), target: "node-1", verdict: Unknown,
			view:     func(t *testing.T) []linstorapi.Replica { return pair(t, "pvc-a", nil, "node-1", "node-2") },
			contains: []string{"node-3 (holds no replica"}},

		{name: "a node that is no Kubernetes Node is no candidate",
			nodes: map[string]NodeInfo{"node-1": fresh("node-1"), "node-2": fresh("node-2"), "node-3": deleted("node-3")}, target: "node-1", verdict: Blocked,
			view: func(t *testing.T) []linstorapi.Replica {
				return viewOf(pair(t, "pvc-a", nil, "node-1", "node-2"), pair(t, "pvc-b", nil, "node-2", "node-3"))
			}},
		{name: "only a tie-breaker on the target: no data to re-place",
			nodes: nodes("node-1", "node-2", "node-3"), target: "node-3", verdict: Safe,
			view: func(t *testing.T) []linstorapi.Replica {
				return controllerViewOf(t, "pvc-a", nil,
					viewReplica{node: "node-1", disks: up, peers: all3("node-1")},
					viewReplica{node: "node-2", disks: up, peers: all3("node-2")},
					viewReplica{node: "node-3", flags: tieBreaker, disks: []string{"Diskless"}, peers: all3("node-3")})
			},
			contains: []string{"only diskless replicas"}},
		{name: "storage-only on the target: a decommission loses it",
			nodes: nodes("node-1", "node-2"), target: "node-1", verdict: Blocked,
			view: func(t *testing.T) []linstorapi.Replica {
				return controllerViewOf(t, "pvc-local", nil, viewReplica{node: "node-1", disks: up, storage: true})
			},
			contains: []string{"storage-only", "loses it"}},
		{name: "nothing on the target", nodes: nodes("node-1", "node-2"), target: "node-2", verdict: Safe,
			view: func(t *testing.T) []linstorapi.Replica {
				return controllerViewOf(t, "pvc-a", nil, viewReplica{node: "node-1", disks: up})
			},
			contains: []string{"holds no DRBD resource"}},
		{name: "the view not current: which resources it holds is unknown", nodes: nodes("node-1", "node-2"), target: "node-1", verdict: Unknown,
			view: func(t *testing.T) []linstorapi.Replica { return nil }, why: "the LINSTOR controller's view has not been read yet"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := NewSnapshot(tc.nodes, t0).WithControllerView(tc.view(t), tc.why)
			res := EvaluateRules([]Rule{linstorReplaceableRule{}}, tc.target, s, t0)
			assert.Equal(t, tc.verdict, res.Verdict, "%+v", res.Reasons)
			msgs := make([]string, 0, len(res.Reasons))
			for _, r := range res.Reasons {
				msgs = append(msgs, r.Message)
			}
			for _, c := range tc.contains {
				assert.Contains(t, strings.Join(msgs, "\n"), c)
			}
		})
	}
}

func TestLinstorReplaceableOnAgentReports(t *testing.T) {
	// Without the controller's view no satellite or pool is known: never
	// safe for a replica with data; blocked when no other node exists.
	two := map[string]NodeInfo{
		"node-1": fresh("node-1", drbd("pvc-a", report.StatusHealthy, true, false, 2, 2)),
		"node-2": fresh("node-2", drbd("pvc-a", report.StatusHealthy, true, false, 2, 2))}
	res := EvaluateRules([]Rule{linstorReplaceableRule{}}, "node-1", snap(two), t0)
	assert.Equal(t, Blocked, res.Verdict, "%+v", res.Reasons)

	three := map[string]NodeInfo{"node-1": two["node-1"], "node-2": two["node-2"], "node-3": fresh("node-3")}
	res = EvaluateRules([]Rule{linstorReplaceableRule{}}, "node-1", snap(three), t0)
	assert.Equal(t, Unknown, res.Verdict, "%+v", res.Reasons)
	assert.Contains(t, res.Reasons[0].Message, "not known without the controller's view")

	client := map[string]NodeInfo{"node-1": fresh("node-1", drbd("pvc-a", report.StatusHealthy, false, true, 3, 2)), "node-2": two["node-2"]}
	res = EvaluateRules([]Rule{linstorReplaceableRule{}}, "node-1", snap(client), t0)
	assert.Equal(t, Safe, res.Verdict, "a DRBD client holds no data: %+v", res.Reasons)
}

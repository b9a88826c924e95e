package drain

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/pkg/report"
)

func reasonsOf(res Result, rule string) []Reason {
	var out []Reason
	for _, r := range res.Reasons {
		if r.Rule == rule {
			out = append(out, r)
		}
	}
	return out
}

func TestEtcdQuorumRule(t *testing.T) {
	healthy := func(n string) NodeInfo { return fresh(n, etcdMember(report.StatusHealthy, false), membership(3, 0)) }
	cases := []struct {
		name     string
		nodes    map[string]NodeInfo
		target   string
		verdict  Verdict
		message  string // exact when set
		contains []string
		healthy  float64 // AttrHealthyAfterDrain when >= 0
	}{
		{name: "3 healthy: safe", nodes: etcdCluster(3, nil), target: "node-1", verdict: Safe, healthy: 2,
			message: "etcd: node-1 is a voting member; draining node-1 leaves 2 of 3 voting members healthy, quorum needs 2"},
		{name: "3 with one Down: blocked with the numbers",
			nodes:  etcdCluster(3, map[string]NodeInfo{"node-2": fresh("node-2", etcdMember(report.StatusDown, false), membership(3, 0))}),
			target: "node-1", verdict: Blocked, healthy: 1,
			message: "etcd: node-1 is a voting member; with node-2 Down (ServiceNotRunning), draining node-1 leaves 1 of 3 voting members healthy, quorum needs 2"},
		{name: "3 draining the Down one: safe",
			nodes:  etcdCluster(3, map[string]NodeInfo{"node-2": fresh("node-2", etcdMember(report.StatusDown, false), membership(3, 0))}),
			target: "node-2", verdict: Safe, healthy: 2},
		{name: "3 with one Degraded member: it votes (near quota is not lost)",
			nodes:  etcdCluster(3, map[string]NodeInfo{"node-3": fresh("node-3", etcdMember(report.StatusDegraded, false), membership(3, 0))}),
			target: "node-1", verdict: Safe, healthy: 2},
		{name: "3 all near quota: drain not blocked",
			nodes: etcdCluster(3, map[string]NodeInfo{
				"node-1": fresh("node-1", etcdMemberAs(report.StatusDegraded, "DBSizeNearQuota"), membership(3, 0)),
				"node-2": fresh("node-2", etcdMemberAs(report.StatusDegraded, "DBSizeNearQuota"), membership(3, 0)),
				"node-3": fresh("node-3", etcdMemberAs(report.StatusDegraded, "DBSizeNearQuota"), membership(3, 0))}),
			target: "node-1", verdict: Safe, healthy: 2,
			message: "etcd: node-1 is a voting member; draining node-1 leaves 2 of 3 voting members healthy, quorum needs 2"},
		{name: "3 under NOSPACE: members vote, the alarm is cluster-wide: not blocked, said",
			nodes: etcdCluster(3, map[string]NodeInfo{
				"node-1": fresh("node-1", etcdMemberAs(report.StatusDown, "AlarmNOSPACE"), membership(3, 0), alarms("AlarmNOSPACE")),
				"node-2": fresh("node-2", etcdMemberAs(report.StatusDown, "AlarmNOSPACE"), membership(3, 0), alarms("AlarmNOSPACE")),
				"node-3": fresh("node-3", etcdMemberAs(report.StatusDown, "AlarmNOSPACE"), membership(3, 0), alarms("AlarmNOSPACE"))}),
			target: "node-1", verdict: Safe, healthy: 2, contains: []string{"etcd has a NOSPACE alarm (cluster-wide, refusing writes): draining this node does not change it"}},
		{name: "3 with a CORRUPT member: it is lost",
			nodes:  etcdCluster(3, map[string]NodeInfo{"node-3": fresh("node-3", etcdMemberAs(report.StatusDown, "AlarmCORRUPT"), membership(3, 0))}),
			target: "node-1", verdict: Blocked, healthy: 1, contains: []string{"node-3 Down (AlarmCORRUPT)"}},
		{name: "control-plane target without an etcd-member observation: unknown, naming it",
			nodes:  etcdCluster(3, map[string]NodeInfo{"node-3": fresh("node-3", membership(3, 0))}),
			target: "node-3", verdict: Unknown, healthy: 2, contains: []string{"node-3 is a control-plane node whose own member is unknown: its report has no etcd member observation"}},
		{name: "control-plane target whose etcd checks read Unknown (no talosconfig): unknown, never safe",
			nodes:  etcdCluster(3, map[string]NodeInfo{"node-3": fresh("node-3", etcdMemberAs(report.StatusUnknown, report.ReasonInputMissing))}),
			target: "node-3", verdict: Unknown, healthy: 2, contains: []string{"its member reads Unknown (InputMissing)"}},
		{name: "every control-plane agent unpatched: unknown",
			nodes:  map[string]NodeInfo{"node-1": fresh("node-1"), "node-2": fresh("node-2"), "node-3": fresh("node-3")},
			target: "node-1", verdict: Unknown, healthy: 0, contains: []string{"NoMemberObservation"}},
		{name: "3 with one stale: unknown, never safe",
			nodes:  etcdCluster(3, map[string]NodeInfo{"node-2": stale("node-2", etcdMember(report.StatusHealthy, false), membership(3, 0))}),
			target: "node-1", verdict: Unknown, healthy: 1, contains: []string{"node-2 stale: no report since", "1 of 3 voting members certainly healthy (2 if the 1 uncertain are healthy)"}},
		{name: "3 with one Unknown member: unknown",
			nodes:  etcdCluster(3, map[string]NodeInfo{"node-3": fresh("node-3", etcdMember(report.StatusUnknown, false), membership(3, 0))}),
			target: "node-1", verdict: Unknown, healthy: 1, contains: []string{"node-3 Unknown"}},
		{name: "3 with one cordoned: counts as gone",
			nodes:  etcdCluster(3, map[string]NodeInfo{"node-2": cordoned("node-2", etcdMember(report.StatusHealthy, false), membership(3, 0))}),
			target: "node-1", verdict: Blocked, healthy: 1, contains: []string{"node-2 cordoned"}},
		{name: "3 with one deleted Node: counts as gone",
			nodes:  etcdCluster(3, map[string]NodeInfo{"node-3": deleted("node-3", etcdMember(report.StatusHealthy, false), membership(3, 0))}),
			target: "node-1", verdict: Blocked, healthy: 1, contains: []string{"node-3 not a Kubernetes Node"}},
		{name: "3 with one member on no reporting node: unknown",
			nodes:  map[string]NodeInfo{"node-1": healthy("node-1"), "node-2": healthy("node-2")},
			target: "node-1", verdict: Unknown, healthy: 1, contains: []string{"1 voting member(s) on no reporting node"}},
		{name: "3 already cordoned target: own cordon does not count against it",
			nodes:  etcdCluster(3, map[string]NodeInfo{"node-1": cordoned("node-1", etcdMember(report.StatusHealthy, false), membership(3, 0))}),
			target: "node-1", verdict: Safe, healthy: 2},
		{name: "5 with one Down: safe (3 of 5)",
			nodes:  etcdCluster(5, map[string]NodeInfo{"node-5": fresh("node-5", etcdMember(report.StatusDown, false), membership(5, 0))}),
			target: "node-1", verdict: Safe, healthy: 3,
			message: "etcd: node-1 is a voting member; with node-5 Down (ServiceNotRunning), draining node-1 leaves 3 of 5 voting members healthy, quorum needs 3"},
		{name: "5 with two Down: blocked (2 of 5)",
			nodes: etcdCluster(5, map[string]NodeInfo{
				"node-4": fresh("node-4", etcdMember(report.StatusDown, false), membership(5, 0)),
				"node-5": fresh("node-5", etcdMember(report.StatusDown, false), membership(5, 0))}),
			target: "node-1", verdict: Blocked, healthy: 2, contains: []string{"leaves 2 of 5 voting members healthy, quorum needs 3"}},
		{name: "5 with one Down and one stale: unknown",
			nodes: etcdCluster(5, map[string]NodeInfo{
				"node-4": fresh("node-4", etcdMember(report.StatusDown, false), membership(5, 0)),
				"node-5": stale("node-5", etcdMember(report.StatusHealthy, false), membership(5, 0))}),
			target: "node-1", verdict: Unknown, healthy: 2},
		{name: "5 with two stale: unknown",
			nodes: etcdCluster(5, map[string]NodeInfo{
				"node-4": stale("node-4", etcdMember(report.StatusHealthy, false), membership(5, 0)),
				"node-5": stale("node-5", etcdMember(report.StatusHealthy, false), membership(5, 0))}),
			target: "node-1", verdict: Unknown, healthy: 2},
		{name: "3 voters + 2 learners: learners do not vote",
			nodes: map[string]NodeInfo{
				"node-1": fresh("node-1", etcdMember(report.StatusHealthy, false), membership(3, 2)),
				"node-2": fresh("node-2", etcdMember(report.StatusDown, false), membership(3, 2)),
				"node-3": fresh("node-3", etcdMember(report.StatusHealthy, false), membership(3, 2)),
				"node-4": fresh("node-4", etcdMember(report.StatusHealthy, true), membership(3, 2)),
				"node-5": fresh("node-5", etcdMember(report.StatusHealthy, true), membership(3, 2))},
			target: "node-1", verdict: Blocked, healthy: 1, contains: []string{"1 of 3 voting members healthy, quorum needs 2"}},
		{name: "draining a learner: safe",
			nodes: map[string]NodeInfo{
				"node-1": fresh("node-1", etcdMember(report.StatusHealthy, false), membership(1, 1)),
				"node-4": fresh("node-4", etcdMember(report.StatusHealthy, true), membership(1, 1))},
			target: "node-4", verdict: Safe, healthy: -1, message: "etcd: node-4 is a learner; learners do not vote"},
		{name: "single member cluster: blocked",
			nodes: etcdCluster(1, nil), target: "node-1", verdict: Blocked, healthy: 0,
			message: "etcd: node-1 is a voting member; draining node-1 leaves 0 of 1 voting members healthy, quorum needs 1"},
		{name: "worker: no member, safe",
			nodes:  etcdCluster(3, map[string]NodeInfo{"worker-1": fresh("worker-1")}),
			target: "worker-1", verdict: Safe, healthy: -1, contains: []string{"worker-1 hosts no member"}},
		{name: "never-reported node, every member accounted for: safe",
			nodes:  etcdCluster(3, map[string]NodeInfo{"worker-1": silent("worker-1")}),
			target: "worker-1", verdict: Safe, healthy: -1, contains: []string{"worker-1 hosts no member: it is not a control-plane node"}},
		{name: "never-reported node, a member unaccounted: unknown",
			nodes:  map[string]NodeInfo{"node-1": healthy("node-1"), "node-2": healthy("node-2"), "node-3": silent("node-3")},
			target: "node-3", verdict: Unknown, healthy: 2, contains: []string{"node-3 is a control-plane node whose own member is unknown: its agent never reported"}},
		{name: "no membership observation: size from members seen",
			nodes: map[string]NodeInfo{
				"node-1": fresh("node-1", etcdMember(report.StatusHealthy, false)),
				"node-2": fresh("node-2", etcdMember(report.StatusHealthy, false)),
				"node-3": fresh("node-3", etcdMember(report.StatusDown, false))},
			target: "node-1", verdict: Blocked, healthy: 1, contains: []string{"1 of 3"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := etcdQuorumRule{}.Judge(tc.target, snap(tc.nodes), t0)
			require.Len(t, got, 1)
			r := got[0]
			assert.Equal(t, tc.verdict, r.Verdict, r.Message)
			assert.Equal(t, RuleEtcdQuorum, r.Rule)
			assert.Equal(t, report.ComponentEtcd, r.Component)
			if tc.message != "" {
				assert.Equal(t, tc.message, r.Message)
			}
			for _, c := range tc.contains {
				assert.Contains(t, r.Message, c)
			}
			if tc.healthy >= 0 {
				assert.Equal(t, tc.healthy, r.Attributes[AttrHealthyAfterDrain], r.Message)
			}
		})
	}
}

func TestFreshUntilMakesCachedSnapshotStale(t *testing.T) {
	nodes := etcdCluster(3, nil)
	s := snap(nodes)
	assert.Equal(t, Safe, Evaluate("node-1", s, t0).Verdict)
	// The same snapshot read after every node's grace ran out: nothing is
	// known any more, and the answer must not stay safe.
	later := Evaluate("node-1", s, t0.Add(time.Minute))
	assert.Equal(t, Unknown, later.Verdict)
	assert.Equal(t, Unknown, reasonsOf(later, RuleTargetData)[0].Verdict)
	assert.Equal(t, Unknown, reasonsOf(later, RuleEtcdQuorum)[0].Verdict)
}

func TestLinstorRules(t *testing.T) {
	H, D, U := report.StatusHealthy, report.StatusDegraded, report.StatusUnknown
	cases := []struct {
		name        string
		nodes       map[string]NodeInfo
		lastReplica Verdict
		quorum      Verdict
		contains    []string
	}{
		{name: "single-replica resource: last replica and quorum both blocked",
			nodes:       map[string]NodeInfo{"node-1": fresh("node-1", drbd("pvc-a", H, true, false, 1, 1))},
			lastReplica: Blocked, quorum: Blocked,
			contains: []string{"linstor: node-1 holds the only UpToDate replica of pvc-a among the nodes that stay; 1 replica(s) in all",
				"linstor: draining node-1 leaves pvc-a with 0 of 1 replicas connected, quorum needs 1"}},
		{name: "2 diskful + tiebreaker, all healthy: safe",
			nodes: map[string]NodeInfo{
				"node-1": fresh("node-1", drbd("pvc-a", H, true, false, 3, 2)),
				"node-2": fresh("node-2", drbd("pvc-a", H, true, false, 3, 2)),
				"node-3": fresh("node-3", drbd("pvc-a", H, false, true, 3, 2))},
			lastReplica: Safe, quorum: Safe,
			contains: []string{"each of the 1 DRBD resources on node-1 keeps an UpToDate replica elsewhere", "keeps a quorum of replicas without it"}},
		{name: "peer Outdated: only UpToDate replica, quorum still held",
			nodes: map[string]NodeInfo{
				"node-1": fresh("node-1", drbd("pvc-a", H, true, false, 3, 1)),
				"node-2": fresh("node-2", drbd("pvc-a", D, false, false, 3, 1)),
				"node-3": fresh("node-3", drbd("pvc-a", H, false, true, 3, 1))},
			lastReplica: Blocked, quorum: Safe, contains: []string{"(node-2 Degraded)"}},
		{name: "UpToDate peer cordoned: blocked on both",
			nodes: map[string]NodeInfo{
				"node-1": fresh("node-1", drbd("pvc-a", H, true, false, 3, 2)),
				"node-2": cordoned("node-2", drbd("pvc-a", H, true, false, 3, 2)),
				"node-3": fresh("node-3", drbd("pvc-a", H, false, true, 3, 2))},
			lastReplica: Blocked, quorum: Blocked, contains: []string{"node-2 cordoned", "1 of 3 replicas connected, quorum needs 2"}},
		{name: "UpToDate peer stale: unknown on both",
			nodes: map[string]NodeInfo{
				"node-1": fresh("node-1", drbd("pvc-a", H, true, false, 3, 2)),
				"node-2": stale("node-2", drbd("pvc-a", H, true, false, 3, 2)),
				"node-3": fresh("node-3", drbd("pvc-a", H, false, true, 3, 2))},
			lastReplica: Unknown, quorum: Unknown, contains: []string{"may hold the only UpToDate replica of pvc-a", "node-2 stale"}},
		{name: "3 diskful, one peer down hard: quorum keeps 2 of 3",
			nodes: map[string]NodeInfo{
				"node-1": fresh("node-1", drbd("pvc-a", H, true, false, 3, 2)),
				"node-2": fresh("node-2", drbd("pvc-a", H, true, false, 3, 2)),
				"node-3": fresh("node-3", drbd("pvc-a", report.StatusDown, false, false, 3, 2))},
			lastReplica: Safe, quorum: Blocked, contains: []string{"1 of 3 replicas connected"}},
		{name: "UpToDate flag on a replica judged Down does not count as a copy",
			nodes: map[string]NodeInfo{
				"node-1": fresh("node-1", drbd("pvc-a", H, true, false, 3, 2)),
				"node-2": fresh("node-2", drbd("pvc-a", report.StatusDown, true, false, 3, 2)),
				"node-3": fresh("node-3", drbd("pvc-a", H, false, true, 3, 2))},
			lastReplica: Blocked, quorum: Blocked, contains: []string{"node-2 Down"}},
		{name: "replicas on unreported nodes that LINSTOR counts UpToDate: unknown",
			nodes:       map[string]NodeInfo{"node-1": fresh("node-1", drbd("pvc-a", H, true, false, 3, 2))},
			lastReplica: Unknown, quorum: Unknown, contains: []string{"2 replica(s) on no reporting node"}},
		{name: "draining the tiebreaker: only quorum matters",
			nodes: map[string]NodeInfo{
				"node-3": fresh("node-3", drbd("pvc-a", H, false, true, 3, 2)),
				"node-1": fresh("node-1", drbd("pvc-a", H, true, false, 3, 2)),
				"node-2": fresh("node-2", drbd("pvc-a", H, true, false, 3, 2))},
			lastReplica: Safe, quorum: Safe},
		{name: "target's replica Unknown and peer not UpToDate: unknown",
			nodes: map[string]NodeInfo{
				"node-1": fresh("node-1", drbd("pvc-a", U, false, false, 3, 0)),
				"node-2": fresh("node-2", drbd("pvc-a", D, false, false, 3, 0)),
				"node-3": fresh("node-3", drbd("pvc-a", H, false, true, 3, 0))},
			lastReplica: Unknown, quorum: Safe, contains: []string{"the state of node-1's replica of pvc-a is unknown"}},
		{name: "node with no resources: safe",
			nodes:       map[string]NodeInfo{"node-1": fresh("node-1"), "node-2": fresh("node-2", drbd("pvc-a", H, true, false, 1, 1))},
			lastReplica: Safe, quorum: Safe, contains: []string{"linstor: node-1 holds no DRBD resource"}},
		// No silent green: a drbd-resource check that failed as a whole
		// (LINSTOR unreachable) lists no resource; that is not "none".
		{name: "drbd-resource check Unknown: unknown, not safe",
			nodes: map[string]NodeInfo{"node-1": fresh("node-1", report.Observation{Component: report.ComponentLinstor, Check: report.CheckDRBDResource,
				Status: U, Reason: report.ReasonCheckFailed}), "node-2": fresh("node-2", drbd("pvc-a", H, true, false, 1, 1))},
			lastReplica: Unknown, quorum: Unknown, contains: []string{"which DRBD resources node-1 holds is unknown: its drbd-resource check reads Unknown (CheckFailed)"}},
		{name: "never reported: unknown",
			nodes:       map[string]NodeInfo{"node-1": silent("node-1"), "node-2": fresh("node-2", drbd("pvc-a", H, true, false, 1, 1))},
			lastReplica: Unknown, quorum: Unknown, contains: []string{"its agent never reported"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := Evaluate("node-"+map[bool]string{true: "3", false: "1"}[tc.name == "draining the tiebreaker: only quorum matters"], snap(tc.nodes), t0)
			lr, q := reasonsOf(res, RuleLinstorLastReplica), reasonsOf(res, RuleLinstorQuorum)
			require.NotEmpty(t, lr)
			require.NotEmpty(t, q)
			assert.Equal(t, tc.lastReplica, lr[0].Verdict, lr[0].Message)
			assert.Equal(t, tc.quorum, q[0].Verdict, q[0].Message)
			var all string
			for _, r := range append(lr, q...) {
				all += r.Message + "\n"
				if r.Verdict != Safe && strings.Contains(r.Message, "pvc-a") {
					require.NotNil(t, r.ResourceRef, r.Message)
					assert.Equal(t, report.ResourceRef{Kind: report.KindResource, Name: "pvc-a"}, *r.ResourceRef)
				}
			}
			for _, c := range tc.contains {
				assert.Contains(t, all, c)
			}
		})
	}
}

func TestLinstorNamesEveryBlockedResource(t *testing.T) {
	H := report.StatusHealthy
	nodes := map[string]NodeInfo{
		"node-1": fresh("node-1", drbd("pvc-a", H, true, false, 1, 1), drbd("pvc-b", H, true, false, 3, 2), drbd("pvc-c", H, true, false, 1, 1)),
		"node-2": fresh("node-2", drbd("pvc-b", H, true, false, 3, 2)),
		"node-3": fresh("node-3", drbd("pvc-b", H, false, true, 3, 2)),
	}
	res := Evaluate("node-1", snap(nodes), t0)
	assert.Equal(t, Blocked, res.Verdict)
	var names []string
	for _, r := range reasonsOf(res, RuleLinstorLastReplica) {
		names = append(names, r.ResourceRef.Name)
	}
	assert.Equal(t, []string{"pvc-a", "pvc-c"}, names)
}

func TestOVNCentralRule(t *testing.T) {
	H, Dn := report.StatusHealthy, report.StatusDown
	ovsOK := report.Observation{Component: report.ComponentKubeOVN, Check: report.CheckOVS, Status: H, Reason: "Running"}
	nb := "OVN_Northbound"
	three := func(o map[string]NodeInfo) map[string]NodeInfo {
		out := map[string]NodeInfo{}
		for _, n := range []string{"node-1", "node-2", "node-3"} {
			out[n] = fresh(n, ovn(nb, H, 3), ovn("OVN_Southbound", H, 3))
		}
		for k, v := range o {
			out[k] = v
		}
		return out
	}
	cases := []struct {
		name     string
		nodes    map[string]NodeInfo
		target   string
		verdicts []Verdict
		contains string
	}{
		{name: "3 healthy: safe per database", nodes: three(nil), target: "node-1", verdicts: []Verdict{Safe, Safe},
			contains: "kube-ovn ovn-central OVN_Northbound: node-1 is a voting member; draining node-1 leaves 2 of 3 voting members healthy, quorum needs 2"},
		{name: "NB member down elsewhere: NB blocked", nodes: three(map[string]NodeInfo{"node-2": fresh("node-2", ovn(nb, Dn, 3), ovn("OVN_Southbound", H, 3))}),
			target: "node-1", verdicts: []Verdict{Blocked, Safe}, contains: "with node-2 Down"},
		{name: "stale member: unknown", nodes: three(map[string]NodeInfo{"node-3": stale("node-3", ovn(nb, H, 3), ovn("OVN_Southbound", H, 3))}),
			target: "node-1", verdicts: []Verdict{Unknown, Unknown}},
		{name: "not a member", nodes: three(map[string]NodeInfo{"worker": fresh("worker", ovsOK)}), target: "worker", verdicts: []Verdict{Safe},
			contains: "kube-ovn: worker hosts no ovn-central member: it is not a control-plane node"},
		// NB: even if node-3 is healthy, draining node-1 leaves 1 of 3: the
		// loss is proven. SB: it hinges on node-3.
		{name: "NB member down, another silent: NB blocked, SB unknown", target: "node-1", verdicts: []Verdict{Blocked, Unknown},
			nodes: three(map[string]NodeInfo{"node-2": fresh("node-2", ovn(nb, Dn, 3), ovn("OVN_Southbound", H, 3)),
				"node-3": stale("node-3", ovn(nb, H, 3), ovn("OVN_Southbound", H, 3))}),
			contains: "OVN_Southbound: node-1 is a voting member; with node-3 stale: no report since 2026-11-30T11:59:00Z, draining node-1 leaves 1 of 3 voting members certainly healthy (2 if the 1 uncertain are healthy), quorum needs 2"},
		// Issue 22 item 2 for ovn-central: a control-plane node that reports
		// kube-ovn but no member, while the members count more servers than
		// nodes report: it may host the missing one.
		{name: "control-plane node without a member, members missing: unknown", target: "node-4", verdicts: []Verdict{Unknown, Safe},
			nodes: map[string]NodeInfo{
				"node-1": fresh("node-1", ovn(nb, H, 4), ovn("OVN_Southbound", H, 3)),
				"node-2": fresh("node-2", ovn(nb, H, 4), ovn("OVN_Southbound", H, 3)),
				"node-3": fresh("node-3", ovn(nb, H, 4), ovn("OVN_Southbound", H, 3)),
				"node-4": fresh("node-4", ovsOK)},
			contains: "kube-ovn ovn-central OVN_Northbound: node-4 is a control-plane node that reports no member, and 1 of 4 voting members are on no reporting node: it may host one"},
		{name: "kube-ovn not deployed: safe", nodes: etcdCluster(3, nil), target: "node-1", verdicts: []Verdict{Safe},
			contains: "kube-ovn: no node observes kube-ovn (no ovs-ovn, no ovn-central member), node-1 included"},
		// No silent green: kube-ovn runs, nobody reports a member.
		{name: "kube-ovn deployed, no member reported: unknown per database", target: "node-1", verdicts: []Verdict{Unknown, Unknown},
			nodes:    map[string]NodeInfo{"node-1": fresh("node-1", ovsOK), "node-2": fresh("node-2", ovsOK)},
			contains: "kube-ovn: kube-ovn runs (observed on 2 node(s)) but no control-plane node reports an ovn-central OVN_Southbound member: whether draining node-1 keeps its quorum is unknown"},
		{name: "only NB reported: SB unknown", target: "worker", verdicts: []Verdict{Unknown},
			nodes:    map[string]NodeInfo{"node-1": fresh("node-1", ovn(nb, H, 1)), "worker": fresh("worker", ovsOK)},
			contains: "no control-plane node reports an ovn-central OVN_Southbound member"},
		{name: "target's check reads Unknown: unknown", target: "worker", verdicts: []Verdict{Unknown},
			nodes: three(map[string]NodeInfo{"worker": fresh("worker", ovsOK, report.Observation{Component: report.ComponentKubeOVN,
				Check: report.CheckOVNCentralMember, Status: report.StatusUnknown, Reason: report.ReasonCheckTimeout})}),
			contains: "whether worker hosts an ovn-central member is unknown: its ovn-central-member check reads Unknown"},
		{name: "target never reported: unknown", target: "worker", verdicts: []Verdict{Unknown},
			nodes:    three(map[string]NodeInfo{"worker": {Exists: true}}),
			contains: "its agent never reported"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := ovnCentralQuorumRule{}.Judge(tc.target, snap(tc.nodes), t0)
			var vs []Verdict
			var all string
			for _, r := range got {
				vs = append(vs, r.Verdict)
				all += r.Message + "\n"
			}
			assert.Equal(t, tc.verdicts, vs, all)
			assert.Contains(t, all, tc.contains)
		})
	}
}

func TestTargetDataRule(t *testing.T) {
	cases := []struct {
		name     string
		node     NodeInfo
		verdict  Verdict
		contains string
	}{
		{name: "fresh", node: fresh("n"), verdict: Safe, contains: "node: n reported 2s ago"},
		{name: "stale", node: stale("n"), verdict: Unknown, contains: "node: n: no valid report since 2026-11-30T11:59:00Z (HeartbeatMissed)"},
		{name: "never reported", node: silent("n"), verdict: Unknown, contains: "has no report from its cozy-health agent"},
		{name: "cordoned fresh", node: cordoned("n"), verdict: Safe, contains: "already cordoned"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := targetDataRule{}.Judge("n", snap(map[string]NodeInfo{"n": tc.node}), t0)
			require.Len(t, got, 1)
			assert.Equal(t, tc.verdict, got[0].Verdict)
			assert.Contains(t, got[0].Message, tc.contains)
		})
	}
	got := targetDataRule{}.Judge("ghost", snap(nil), t0)
	assert.Equal(t, Unknown, got[0].Verdict)
	assert.False(t, snap(nil).Known("ghost"))
}

func TestVerdictPrecedence(t *testing.T) {
	// node-2's etcd member is Down (a certain blocker) and node-1's own data
	// is stale (unknown): the blocker wins and both reasons are listed,
	// blocked first.
	nodes := etcdCluster(3, map[string]NodeInfo{
		"node-1": stale("node-1", etcdMember(report.StatusHealthy, false), membership(3, 0)),
		"node-2": fresh("node-2", etcdMember(report.StatusDown, false), membership(3, 0)),
	})
	res := Evaluate("node-1", snap(nodes), t0)
	assert.Equal(t, Blocked, res.Verdict)
	require.GreaterOrEqual(t, len(res.Reasons), 3)
	assert.Equal(t, Blocked, res.Reasons[0].Verdict)
	assert.Equal(t, RuleEtcdQuorum, res.Reasons[0].Rule)
	assert.Equal(t, Unknown, res.Reasons[1].Verdict)
	assert.Equal(t, RuleTargetData, res.Reasons[1].Rule)
	for _, r := range res.Reasons[2:] {
		assert.Equal(t, Safe, r.Verdict)
	}

	// Unknown without a blocker: unknown.
	nodes["node-2"] = fresh("node-2", etcdMember(report.StatusHealthy, false), membership(3, 0))
	assert.Equal(t, Unknown, Evaluate("node-1", snap(nodes), t0).Verdict)

	// Everything fresh and healthy: safe, with a reason from every rule.
	nodes["node-1"] = fresh("node-1", etcdMember(report.StatusHealthy, false), membership(3, 0))
	res = Evaluate("node-1", snap(nodes), t0)
	assert.Equal(t, Safe, res.Verdict)
	rules := map[string]bool{}
	for _, r := range res.Reasons {
		rules[r.Rule] = true
	}
	for _, r := range Rules {
		assert.True(t, rules[r.Name()], "rule %s gave no reason", r.Name())
	}
}

func TestNoRulesIsNeverSafe(t *testing.T) {
	res := EvaluateRules(nil, "node-1", snap(etcdCluster(3, nil)), t0)
	assert.Equal(t, Unknown, res.Verdict)
}

func TestIndexerIncrementalMatchesFullSnapshot(t *testing.T) {
	H, Dn := report.StatusHealthy, report.StatusDown
	nodes := map[string]NodeInfo{
		"node-1": fresh("node-1", etcdMember(H, false), membership(3, 0), drbd("pvc-a", H, true, false, 3, 2), drbd("pvc-b", H, true, false, 3, 2)),
		"node-2": fresh("node-2", etcdMember(H, false), membership(3, 0), drbd("pvc-a", H, true, false, 3, 2)),
		"node-3": fresh("node-3", etcdMember(H, false), membership(3, 0), drbd("pvc-a", H, false, true, 3, 2), drbd("pvc-b", H, true, false, 3, 2)),
		// node-4 holds only a diskless tiebreaker; it is no control-plane
		// node (one would list a fourth etcd member, and the claims of 3
		// would be below it: quorum.TestReadSizeNeverBelowMembersSeen).
		"node-4": asWorker(fresh("node-4", drbd("pvc-b", H, false, true, 3, 2))),
	}
	var x Indexer
	check := func(step string) {
		inc := x.Snapshot(nodes, t0)
		full := NewSnapshot(nodes, t0)
		for n := range nodes {
			assert.Equal(t, Evaluate(n, full, t0), Evaluate(n, inc, t0), "%s: %s", step, n)
		}
	}
	check("first")
	assert.Equal(t, Safe, Evaluate("node-1", x.Snapshot(nodes, t0), t0).Verdict)
	// A status change, same placement.
	nodes["node-2"] = fresh("node-2", etcdMember(Dn, false), membership(3, 0), drbd("pvc-a", report.StatusDegraded, false, false, 3, 1))
	check("status change")
	assert.Equal(t, Blocked, Evaluate("node-1", x.Snapshot(nodes, t0), t0).Verdict)
	// A replica moves: pvc-b leaves node-3 for node-2.
	nodes["node-3"] = fresh("node-3", etcdMember(H, false), membership(3, 0), drbd("pvc-a", H, false, true, 3, 2))
	nodes["node-2"] = fresh("node-2", etcdMember(H, false), membership(3, 0), drbd("pvc-a", H, true, false, 3, 2), drbd("pvc-b", H, true, false, 3, 2))
	check("replica moved")
	// A node disappears from the state.
	delete(nodes, "node-4")
	check("node removed")
	res := Evaluate("node-1", x.Snapshot(nodes, t0), t0)
	assert.Equal(t, Unknown, reasonsOf(res, RuleLinstorQuorum)[0].Verdict, "pvc-b's tiebreaker is on no reporting node now")
}

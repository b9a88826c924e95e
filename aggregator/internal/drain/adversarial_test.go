package drain

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/aggregator/internal/quorum"
	"github.com/cozystack/cozy-health/pkg/report"
)

// TestAdversarialDrain is issue 27's table for the drain check: honest
// nodes whose facts block (or leave unknown) a drain, and one compromised
// node's reports beside them. No single node's reports may turn the answer
// safe. Before the trust rules, the worker's claims were counted and each
// of these answered safe.
func TestAdversarialDrain(t *testing.T) {
	const (
		H  = report.StatusHealthy
		Dn = report.StatusDown
	)
	nb := quorum.OVNNorthbound
	sb := quorum.OVNSouthbound
	honestEtcd := func() map[string]NodeInfo {
		return map[string]NodeInfo{
			"node-1": fresh("node-1", etcdMember(H, false), membership(3, 0)),
			"node-2": fresh("node-2", etcdMember(H, false), membership(3, 0)),
			"node-3": fresh("node-3", etcdMember(Dn, false), membership(3, 0)),
		}
	}
	with := func(base map[string]NodeInfo, name string, n NodeInfo) map[string]NodeInfo {
		base[name] = n
		return base
	}
	honestDRBD := func() map[string]NodeInfo {
		return map[string]NodeInfo{
			"node-1": fresh("node-1", drbd("pvc-a", H, true, false, 2, 1)),
			"node-2": fresh("node-2", drbd("pvc-a", report.StatusDegraded, false, false, 2, 1)),
		}
	}
	for _, tc := range []struct {
		name    string
		nodes   map[string]NodeInfo
		target  string
		rule    string
		honest  Verdict // the honest nodes alone
		verdict Verdict // with the adversary
	}{
		{name: "worker claims a healthy etcd member", rule: RuleEtcdQuorum, target: "node-1", honest: Blocked, verdict: Blocked,
			nodes: with(honestEtcd(), "worker-1", fresh("worker-1", etcdMember(H, false), membership(3, 0)))},
		{name: "worker claims two healthy etcd members and a larger size", rule: RuleEtcdQuorum, target: "node-1", honest: Blocked, verdict: Blocked,
			nodes: with(honestEtcd(), "worker-1", fresh("worker-1", etcdMember(H, false), etcdMember(H, false), membership(2, 0)))},
		{name: "control-plane node claims a second member", rule: RuleEtcdQuorum, target: "node-1", honest: Blocked, verdict: Unknown,
			nodes: with(honestEtcd(), "node-3", fresh("node-3", etcdMember(Dn, false), etcdMember(H, false), membership(3, 0)))},
		{name: "control-plane node claims a smaller cluster: the majority's size stands", rule: RuleEtcdQuorum, target: "node-1", honest: Blocked, verdict: Blocked,
			nodes: with(honestEtcd(), "node-3", fresh("node-3", etcdMember(Dn, false), membership(1, 0)))},
		// Issue 34 item 6: a control-plane node's claim of a smaller
		// cluster, while the other members are Down or silent and claim
		// no size, made its own member a quorum. The count is never below
		// the members listed (for etcd one per control-plane node).
		{name: "control-plane node claims 1 member, the others Down: drain of node-2", rule: RuleEtcdQuorum, target: "node-2", verdict: Blocked,
			nodes: shrunkEtcd(3, 1, 1, nil)},
		{name: "control-plane node claims 1 member, the others Down: drain of node-3", rule: RuleEtcdQuorum, target: "node-3", verdict: Blocked,
			nodes: shrunkEtcd(3, 1, 1, nil)},
		{name: "control-plane node claims 1 member, the others silent", rule: RuleEtcdQuorum, target: "node-2", verdict: Unknown,
			nodes: shrunkEtcd(3, 1, 1, map[string]NodeInfo{
				"node-2": stale("node-2", etcdMember(H, false), membership(3, 0)),
				"node-3": silent("node-3"),
			})},
		{name: "two control-plane nodes of five claim 2 members, the others Down", rule: RuleEtcdQuorum, target: "node-3", verdict: Blocked,
			nodes: shrunkEtcd(5, 2, 2, nil)},
		{name: "two control-plane nodes of five claim 2 members, the others Down: drain of a liar", rule: RuleEtcdQuorum, target: "node-1", verdict: Blocked,
			nodes: shrunkEtcd(5, 2, 2, nil)},
		{name: "control-plane node claims 1 ovn-central NB server, the others Down", rule: RuleOVNCentralQuorum, target: "node-2", verdict: Blocked,
			nodes: map[string]NodeInfo{
				"node-1": fresh("node-1", etcdMember(H, false), membership(3, 0), ovn(nb, H, 1), ovn(sb, H, 3)),
				"node-2": fresh("node-2", etcdMember(H, false), membership(3, 0), ovnSizeless(nb, Dn), ovn(sb, H, 3)),
				"node-3": fresh("node-3", etcdMember(H, false), membership(3, 0), ovnSizeless(nb, Dn), ovn(sb, H, 3)),
			}},
		{name: "worker claims a healthy ovn-central member", rule: RuleOVNCentralQuorum, target: "node-1", honest: Blocked, verdict: Blocked,
			nodes: map[string]NodeInfo{
				"node-1":   fresh("node-1", ovn(nb, H, 3), ovn(sb, H, 3)),
				"node-2":   fresh("node-2", ovn(nb, H, 3), ovn(sb, H, 3)),
				"node-3":   fresh("node-3", ovn(nb, Dn, 3), ovn(sb, H, 3)),
				"worker-1": fresh("worker-1", ovn(nb, H, 3)),
			}},
		{name: "worker claims an UpToDate replica of the last one", rule: RuleLinstorLastReplica, target: "node-1", honest: Blocked, verdict: Unknown,
			nodes: with(honestDRBD(), "worker-1", fresh("worker-1", drbd("pvc-a", H, true, false, 3, 2)))},
		{name: "the target understates its own replica", rule: RuleLinstorLastReplica, target: "node-1", honest: Blocked, verdict: Unknown,
			nodes: with(honestDRBD(), "node-1", fresh("node-1", drbd("pvc-a", report.StatusDegraded, false, false, 2, 0)))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := Evaluate(tc.target, snap(tc.nodes), t0)
			rs := reasonsOf(res, tc.rule)
			require.NotEmpty(t, rs)
			assert.Equal(t, tc.verdict, rs[0].Verdict, rs[0].Message)
			assert.NotEqual(t, Safe, res.Verdict, "no single node's reports make a drain safe")
			if tc.honest != "" {
				h := honestOnly(tc.nodes, tc.name)
				if h != nil {
					assert.Equal(t, tc.honest, reasonsOf(Evaluate(tc.target, snap(h), t0), tc.rule)[0].Verdict, "the honest nodes alone")
				}
			}
		})
	}
}

// shrunkEtcd is n control-plane nodes: node-1..node-liars healthy members
// claiming claim voting members, the others Down members claiming no size
// (a member that does not run lists none); then the overrides.
func shrunkEtcd(n, liars, claim int, override map[string]NodeInfo) map[string]NodeInfo {
	out := map[string]NodeInfo{}
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("node-%d", i)
		if i <= liars {
			out[name] = fresh(name, etcdMember(report.StatusHealthy, false), membership(claim, 0))
		} else {
			out[name] = fresh(name, etcdMember(report.StatusDown, false))
		}
	}
	for k, v := range override {
		out[k] = v
	}
	return out
}

// ovnSizeless is an ovn-central-member observation of a member that lists
// no servers (one that does not run).
func ovnSizeless(db string, st report.Status) report.Observation {
	o := ovn(db, st, 0)
	o.Reason, o.Attributes = "MemberNotRunning", nil
	return o
}

// honestOnly drops the worker adversary, if the case has one.
func honestOnly(nodes map[string]NodeInfo, _ string) map[string]NodeInfo {
	if _, ok := nodes["worker-1"]; !ok {
		return nil
	}
	out := map[string]NodeInfo{}
	for k, v := range nodes {
		if k != "worker-1" {
			out[k] = v
		}
	}
	return out
}

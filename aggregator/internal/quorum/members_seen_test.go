package quorum

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/aggregator/internal/state"
	"github.com/cozystack/cozy-health/pkg/report"
)

// belowMembersSeen is ReasonBelowMembersSeen, spelled out: the metric's
// label value is part of the contract (docs/security.md).
const belowMembersSeen = "below_members_seen"

// sizeless is a member observation without a size claim: a Down member
// (or one whose agent reads no membership) says nothing of the size.
func sizeless(st report.Status, reason string) report.Observation { return member(st, reason) }

func staleOf(name string, obs ...report.Observation) Node {
	n := nodeOf(name, state.RoleControlPlane, obs...)
	n.Fresh = false
	return n
}

func ovnNB(st report.Status, reason string, servers int) report.Observation {
	o := report.Observation{Component: report.ComponentKubeOVN, Check: report.CheckOVNCentralMember, Status: st, Reason: reason,
		ResourceRef: &report.ResourceRef{Kind: report.KindOVNDatabase, Name: OVNNorthbound}}
	if servers > 0 {
		o.Attributes = map[string]float64{report.AttrRaftServers: float64(servers)}
	}
	return o
}

// TestReadSizeNeverBelowMembersSeen is issue 34 item 6: one compromised
// control-plane node (or two of five) claiming a smaller cluster while the
// other members are Down or silent (no size claim of theirs) made its own
// healthy member a quorum: etcd Healthy with 2 of 3 members Down. A size
// claim below the voting members the view lists is rejected
// (below_members_seen) and the count is the members listed.
func TestReadSizeNeverBelowMembersSeen(t *testing.T) {
	cp := state.RoleControlPlane
	H, D := report.StatusHealthy, report.StatusDown
	for _, tc := range []struct {
		name     string
		cluster  string
		nodes    []Node
		voting   int
		source   Source
		judge    Judgement
		rejected []Rejection
	}{
		{name: "3 nodes, one liar claims 1, the others Down", cluster: Etcd,
			nodes: []Node{
				nodeOf("cp-1", cp, member(H, "MemberHealthy"), size(1)),
				nodeOf("cp-2", cp, sizeless(D, "ServiceNotRunning")),
				nodeOf("cp-3", cp, sizeless(D, "ServiceNotRunning")),
			},
			voting: 3, source: Counted, judge: Lost,
			rejected: []Rejection{{Node: "cp-1", Kind: report.CheckEtcdMembership, Reason: belowMembersSeen}}},
		{name: "3 nodes, one liar claims 1, the others silent", cluster: Etcd,
			nodes: []Node{
				nodeOf("cp-1", cp, member(H, "MemberHealthy"), size(1)),
				staleOf("cp-2", member(H, "MemberHealthy"), size(3)),
				staleOf("cp-3", member(H, "MemberHealthy"), size(3)),
			},
			voting: 3, source: Counted, judge: Undetermined,
			rejected: []Rejection{{Node: "cp-1", Kind: report.CheckEtcdMembership, Reason: belowMembersSeen}}},
		{name: "3 nodes, one liar claims 1, the others never reported", cluster: Etcd,
			nodes: []Node{
				nodeOf("cp-1", cp, member(H, "MemberHealthy"), size(1)),
				{Name: "cp-2", Role: cp},
				{Name: "cp-3", Role: cp},
			},
			voting: 3, source: Counted, judge: Undetermined,
			rejected: []Rejection{{Node: "cp-1", Kind: report.CheckEtcdMembership, Reason: belowMembersSeen}}},
		{name: "5 nodes, two liars claim 2, three others Down", cluster: Etcd,
			nodes: []Node{
				nodeOf("cp-1", cp, member(H, "MemberHealthy"), size(2)),
				nodeOf("cp-2", cp, member(H, "MemberHealthy"), size(2)),
				nodeOf("cp-3", cp, sizeless(D, "ServiceNotRunning")),
				nodeOf("cp-4", cp, sizeless(D, "ServiceNotRunning")),
				nodeOf("cp-5", cp, sizeless(D, "ServiceNotRunning")),
			},
			voting: 5, source: Counted, judge: Lost,
			rejected: []Rejection{
				{Node: "cp-1", Kind: report.CheckEtcdMembership, Reason: belowMembersSeen},
				{Node: "cp-2", Kind: report.CheckEtcdMembership, Reason: belowMembersSeen},
			}},
		{name: "ovn-central NB, one liar claims 1 server, the others Down", cluster: OVNNorthbound,
			nodes: []Node{
				nodeOf("cp-1", cp, ovnNB(H, "ClusterMember", 1)),
				nodeOf("cp-2", cp, ovnNB(D, "MemberNotRunning", 0)),
				nodeOf("cp-3", cp, ovnNB(D, "MemberNotRunning", 0)),
			},
			voting: 3, source: Counted, judge: Lost,
			rejected: []Rejection{{Node: "cp-1", Kind: report.CheckOVNCentralMember, Reason: belowMembersSeen}}},
		{name: "a liar beside honest claims: the majority of the rest stands", cluster: Etcd,
			nodes: []Node{
				nodeOf("cp-1", cp, member(H, "MemberHealthy"), size(3)),
				nodeOf("cp-2", cp, member(H, "MemberHealthy"), size(3)),
				nodeOf("cp-3", cp, member(H, "MemberHealthy"), size(1)),
			},
			voting: 3, source: Reported, judge: Intact,
			rejected: []Rejection{{Node: "cp-3", Kind: report.CheckEtcdMembership, Reason: belowMembersSeen}}},
		{name: "learners are not members seen: a claim of the voters stands", cluster: Etcd,
			nodes: []Node{
				nodeOf("cp-1", cp, member(H, "MemberHealthy"), size(2)),
				nodeOf("cp-2", cp, member(H, "MemberHealthy"), size(2)),
				nodeOf("cp-3", cp, report.Observation{Component: report.ComponentEtcd, Check: report.CheckEtcdMember, Status: H, Reason: "MemberHealthy",
					Attributes: map[string]float64{report.AttrIsLearner: 1}}, size(2)),
			},
			voting: 2, source: Reported, judge: Intact},
		{name: "a claim equal to the members seen is believed", cluster: Etcd,
			nodes: []Node{
				nodeOf("cp-1", cp, member(H, "MemberHealthy"), size(2)),
				nodeOf("cp-2", cp, sizeless(D, "ServiceNotRunning")),
			},
			voting: 2, source: Reported, judge: Lost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Read(tc.cluster, tc.nodes)
			assert.Equal(t, tc.voting, v.Voting, "voting members")
			assert.Equal(t, tc.source, v.Source)
			assert.GreaterOrEqual(t, v.Voting, v.Seen(), "never fewer voting members than listed")
			assert.Equal(t, tc.judge, v.Count().Judge(), "%+v", v.Count())
			assert.ElementsMatch(t, tc.rejected, v.Rejected)
			for _, s := range v.Sizes {
				assert.GreaterOrEqual(t, s, v.Seen(), "Sizes hold only believed claims")
			}
			if len(tc.rejected) > 0 {
				assert.Contains(t, v.SizeNote("votingMembers"), "below the")
			}
		})
	}
}

// TestAuditorCountsSizeBelowMembersSeen: the rejected size claim reaches
// cozy_health_claims_rejected_total{kind,reason} through the Auditor, as
// the rollup hands it (rollup's TestAdversarial).
func TestAuditorCountsSizeBelowMembersSeen(t *testing.T) {
	cp := state.RoleControlPlane
	reg := prometheus.NewRegistry()
	a, err := NewAuditor(reg, nil, func() time.Time { return time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC) })
	require.NoError(t, err)
	for _, v := range []View{
		Read(Etcd, []Node{
			nodeOf("cp-1", cp, member(report.StatusHealthy, "MemberHealthy"), size(1)),
			nodeOf("cp-2", cp, sizeless(report.StatusDown, "ServiceNotRunning")),
			nodeOf("cp-3", cp, sizeless(report.StatusDown, "ServiceNotRunning")),
		}),
		Read(OVNNorthbound, []Node{
			nodeOf("cp-1", cp, ovnNB(report.StatusHealthy, "ClusterMember", 1)),
			nodeOf("cp-2", cp, ovnNB(report.StatusDown, "MemberNotRunning", 0)),
		}),
	} {
		for _, r := range v.Rejected {
			a.Reject(r, "")
		}
	}
	assert.InDelta(t, 1, testutil.ToFloat64(a.counter.WithLabelValues(report.CheckEtcdMembership, belowMembersSeen)), 0)
	assert.InDelta(t, 1, testutil.ToFloat64(a.counter.WithLabelValues(report.CheckOVNCentralMember, belowMembersSeen)), 0)
}

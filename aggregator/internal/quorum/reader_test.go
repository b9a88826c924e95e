package quorum

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/cozystack/cozy-health/aggregator/internal/state"
	"github.com/cozystack/cozy-health/pkg/report"
)

func member(st report.Status, reason string) report.Observation {
	return report.Observation{Component: report.ComponentEtcd, Check: report.CheckEtcdMember, Status: st, Reason: reason,
		Attributes: map[string]float64{report.AttrIsLearner: 0}}
}

func size(v int) report.Observation {
	return report.Observation{Component: report.ComponentEtcd, Check: report.CheckEtcdMembership, Status: report.StatusHealthy,
		Attributes: map[string]float64{report.AttrVotingMembers: float64(v)}}
}

func nodeOf(name string, role state.Role, obs ...report.Observation) Node {
	return Node{Name: name, Role: role, Reported: true, Fresh: true, Claims: ClaimsOf(&report.NodeReport{NodeName: name, Observations: obs})}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		st     report.Status
		reason string
		want   Class
	}{
		{report.StatusHealthy, "MemberHealthy", Votes},
		{report.StatusDegraded, "DBSizeNearQuota", Warns},
		{report.StatusDegraded, "MemberErrors", Warns},
		{report.StatusDown, ReasonAlarmNOSPACE, NoSpace},
		{report.StatusDown, "AlarmCORRUPT", CannotVote},
		{report.StatusDown, "NoLeader", CannotVote},
		{report.StatusUnknown, "InputMissing", Unknown},
	} {
		assert.Equal(t, tc.want, Classify(tc.st, tc.reason), tc.reason)
	}
	assert.True(t, Warns.Counts())
	assert.True(t, NoSpace.Counts())
	assert.False(t, CannotVote.Counts())
	assert.False(t, Unknown.Counts())
}

func TestAgreed(t *testing.T) {
	for _, tc := range []struct {
		sizes []int
		want  int
		ok    bool
	}{
		{nil, 0, false},
		{[]int{3}, 3, true},
		{[]int{3, 3, 9}, 3, true},
		{[]int{3, 9}, 0, false},
		{[]int{3, 3, 5, 5}, 0, false},
		{[]int{1, 3, 3, 3, 9}, 3, true},
	} {
		v, ok := agreed(tc.sizes)
		assert.Equal(t, tc.ok, ok, "%v", tc.sizes)
		assert.Equal(t, tc.want, v, "%v", tc.sizes)
	}
}

func TestReadTrust(t *testing.T) {
	cp, w := state.RoleControlPlane, state.RoleWorker
	// Five control-plane nodes list five voting members (cp-3's rejected,
	// cp-4's and cp-5's unknown): the sizes claimed are at least that
	// (TestReadSizeNeverBelowMembersSeen rejects smaller ones).
	v := Read(Etcd, []Node{
		nodeOf("cp-1", cp, member(report.StatusHealthy, "MemberHealthy"), size(5)),
		nodeOf("cp-2", cp, member(report.StatusDegraded, "DBSizeNearQuota"), size(5)),
		nodeOf("cp-3", cp, member(report.StatusHealthy, "MemberHealthy"), member(report.StatusDown, "NoLeader"), size(7)),
		nodeOf("cp-4", cp), // reports, no member
		nodeOf("w", w, member(report.StatusDown, "NoLeader"), size(9)),
		nodeOf("x", state.RoleUnknown, member(report.StatusHealthy, "MemberHealthy")),
		{Name: "cp-5", Role: cp}, // never reported
	})
	assert.Equal(t, 5, v.Voting)
	assert.Equal(t, Reported, v.Source)
	assert.Equal(t, []int{5, 5, 7}, v.Sizes)
	assert.ElementsMatch(t, []Rejection{
		{Node: "cp-3", Kind: report.CheckEtcdMember, Reason: "duplicate_member"},
		{Node: "w", Kind: report.CheckEtcdMember, Reason: "not_control_plane"},
		{Node: "w", Kind: report.CheckEtcdMembership, Reason: "not_control_plane"},
		{Node: "x", Kind: report.CheckEtcdMember, Reason: "role_unknown"},
	}, v.Rejected)
	reasons := map[string]string{}
	for _, m := range v.Members {
		reasons[m.Node] = m.Reason
	}
	assert.Equal(t, map[string]string{"cp-1": "MemberHealthy", "cp-2": "DBSizeNearQuota", "cp-3": ReasonClaimRejected,
		"cp-4": ReasonNoMemberObservation, "cp-5": report.ReasonNoData}, reasons)
	c := v.Count()
	assert.Equal(t, Count{Voting: 5, Healthy: 2}, c, "the near-quota member votes; the others are unknown")
}

func TestClaimsEqualSeesEveryReadFact(t *testing.T) {
	ovn := func(servers float64, reason string) *report.NodeReport {
		return &report.NodeReport{Observations: []report.Observation{{Component: report.ComponentKubeOVN, Check: report.CheckOVNCentralMember,
			Status: report.StatusHealthy, Reason: reason, ResourceRef: &report.ResourceRef{Kind: report.KindOVNDatabase, Name: OVNNorthbound},
			Attributes: map[string]float64{report.AttrRaftServers: servers}}}}
	}
	assert.True(t, ClaimsOf(ovn(3, "ClusterMember")).Equal(ClaimsOf(ovn(3, "ClusterMember"))))
	assert.False(t, ClaimsOf(ovn(3, "ClusterMember")).Equal(ClaimsOf(ovn(4, "ClusterMember"))), "raftServers")
	assert.False(t, ClaimsOf(ovn(3, "ClusterMember")).Equal(ClaimsOf(ovn(3, ReasonMemberJoining))), "a joining server does not vote")
}

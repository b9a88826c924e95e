package drain

import (
	"fmt"
	"time"

	"github.com/cozystack/cozy-health/pkg/report"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// obs builders in the shapes the agent sends (pkg/report/vocabulary.go).

func etcdMember(st report.Status, learner bool) report.Observation {
	l := 0.0
	if learner {
		l = 1
	}
	reason := "MemberHealthy"
	if st != report.StatusHealthy {
		reason = "ServiceNotRunning"
	}
	return report.Observation{Component: report.ComponentEtcd, Check: report.CheckEtcdMember, Status: st, Reason: reason,
		Attributes: map[string]float64{report.AttrIsLearner: l, report.AttrMemberID: 1}}
}

func membership(voting, learners int) report.Observation {
	return report.Observation{Component: report.ComponentEtcd, Check: report.CheckEtcdMembership, Status: report.StatusHealthy, Reason: "MembersListed",
		Attributes: map[string]float64{report.AttrVotingMembers: float64(voting), report.AttrLearnerMembers: float64(learners)}}
}

func drbd(res string, st report.Status, upToDate, diskless bool, replicas, upToDateReplicas int) report.Observation {
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	return report.Observation{Component: report.ComponentLinstor, Check: report.CheckDRBDResource, Status: st, Reason: "DiskState",
		ResourceRef: &report.ResourceRef{Kind: report.KindResource, Name: res},
		Attributes: map[string]float64{report.AttrUpToDate: b(upToDate), report.AttrDiskless: b(diskless),
			report.AttrReplicas: float64(replicas), report.AttrUpToDateReplicas: float64(upToDateReplicas)}}
}

func ovn(db string, st report.Status, servers int) report.Observation {
	return report.Observation{Component: report.ComponentKubeOVN, Check: report.CheckOVNCentralMember, Status: st, Reason: "ClusterMember",
		ResourceRef: &report.ResourceRef{Kind: report.KindOVNDatabase, Name: db},
		Attributes:  map[string]float64{report.AttrRaftServers: float64(servers)}}
}

func rep(node string, obs ...report.Observation) *report.NodeReport {
	return &report.NodeReport{NodeName: node, AgentInstanceID: "a", Sequence: 1, SentAt: t0, Interval: 5 * time.Second, Observations: obs}
}

// node states.

func fresh(node string, obs ...report.Observation) NodeInfo {
	return NodeInfo{Exists: true, LastReport: rep(node, obs...), LastHeard: t0.Add(-2 * time.Second), Fresh: true, FreshUntil: t0.Add(13 * time.Second)}
}

func stale(node string, obs ...report.Observation) NodeInfo {
	return NodeInfo{Exists: true, LastReport: rep(node, obs...), LastHeard: t0.Add(-time.Minute), Fresh: false}
}

func cordoned(node string, obs ...report.Observation) NodeInfo {
	n := fresh(node, obs...)
	n.Cordoned = true
	return n
}

func deleted(node string, obs ...report.Observation) NodeInfo {
	n := fresh(node, obs...)
	n.Exists = false
	return n
}

func silent() NodeInfo { return NodeInfo{Exists: true} }

// etcdCluster builds n control-plane nodes node-1..node-n with healthy
// voting members, then applies the overrides.
func etcdCluster(n int, override map[string]NodeInfo) map[string]NodeInfo {
	out := map[string]NodeInfo{}
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("node-%d", i)
		out[name] = fresh(name, etcdMember(report.StatusHealthy, false), membership(n, 0))
	}
	for k, v := range override {
		out[k] = v
	}
	return out
}

func snap(nodes map[string]NodeInfo) *Snapshot { return NewSnapshot(nodes, t0) }

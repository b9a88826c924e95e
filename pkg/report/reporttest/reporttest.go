// Package reporttest builds agent reports for tests of the aggregator.
package reporttest

import (
	"time"

	"github.com/cozystack/cozy-health/pkg/report"
)

// LabNode is what a lab node's agent reports when all is well: every check
// of every node-local component Healthy, the node an etcd voting member of
// 3 and an ovn-central member of NB and SB (as every lab node is), holding
// a replica of pvc-1, sent at at with the given interval.
func LabNode(node string, seq uint64, at time.Time, interval time.Duration) *report.NodeReport {
	o := func(comp, check, reason string) report.Observation {
		return report.Observation{Component: comp, Check: check, Status: report.StatusHealthy, Reason: reason, Message: check + " ok"}
	}
	member := o(report.ComponentEtcd, report.CheckEtcdMember, "MemberHealthy")
	member.Attributes = map[string]float64{report.AttrIsLearner: 0}
	membership := o(report.ComponentEtcd, report.CheckEtcdMembership, "MembersListed")
	membership.Attributes = map[string]float64{report.AttrVotingMembers: 3, report.AttrLearnerMembers: 0}
	ovn := func(db string) report.Observation {
		m := o(report.ComponentKubeOVN, report.CheckOVNCentralMember, "ClusterMember")
		m.ResourceRef = &report.ResourceRef{Kind: report.KindOVNDatabase, Name: db}
		m.Attributes = map[string]float64{report.AttrRaftServers: 3}
		return m
	}
	drbd := o(report.ComponentLinstor, report.CheckDRBDResource, "UpToDate")
	drbd.ResourceRef = &report.ResourceRef{Kind: report.KindResource, Name: "pvc-1"}
	return &report.NodeReport{
		NodeName: node, AgentInstanceID: "agent-" + node, Sequence: seq, SentAt: at, Interval: interval,
		Observations: []report.Observation{
			member, membership,
			o(report.ComponentEtcd, report.CheckEtcdAlarms, "NoAlarms"),
			o(report.ComponentEtcd, report.CheckFsyncLatency, "FsyncFast"),
			o(report.ComponentDisk, report.CheckFsyncProbe, "ProbeFast"),
			o(report.ComponentCilium, report.CheckCiliumAgent, "AgentHealthy"),
			o(report.ComponentCilium, report.CheckCiliumNodeConnectivity, "AllNodesReachable"),
			o(report.ComponentKubeOVN, report.CheckOVS, "OVSRunning"),
			ovn("OVN_Northbound"), ovn("OVN_Southbound"),
			o(report.ComponentLinstor, report.CheckLinstorSatellite, "Online"),
			drbd,
			o(report.ComponentNode, report.CheckTalosServices, "ServicesRunning"),
		},
	}
}

// Disk is a node's report with two checks: its disk's fsync probe at disk
// (reason Probe<disk>) and its Talos services Healthy, sent at at every 5 s.
func Disk(node string, seq uint64, at time.Time, disk report.Status) *report.NodeReport {
	return &report.NodeReport{
		NodeName: node, AgentInstanceID: "agent-" + node, Sequence: seq, SentAt: at, Interval: 5 * time.Second,
		Observations: []report.Observation{
			{Component: report.ComponentDisk, Check: report.CheckFsyncProbe, Status: disk, Reason: "Probe" + disk.String(), Message: "probe"},
			{Component: report.ComponentNode, Check: report.CheckTalosServices, Status: report.StatusHealthy, Reason: "ServicesRunning"},
		},
	}
}

// Observations in the shapes the agent sends (pkg/report/vocabulary.go),
// one builder a check, for tests that judge them (the drain rules).

// EtcdMember is an etcd-member observation with status st (reason
// MemberHealthy when Healthy, ServiceNotRunning otherwise), a learner or a
// voting member.
func EtcdMember(st report.Status, learner bool) report.Observation {
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

// EtcdMembership is a Healthy etcd-membership observation listing voting
// and learner members.
func EtcdMembership(voting, learners int) report.Observation {
	return report.Observation{Component: report.ComponentEtcd, Check: report.CheckEtcdMembership, Status: report.StatusHealthy, Reason: "MembersListed",
		Attributes: map[string]float64{report.AttrVotingMembers: float64(voting), report.AttrLearnerMembers: float64(learners)}}
}

// DRBDResource is a drbd-resource observation of resource res with status
// st: this node's replica up to date or not, diskless or not, and the
// resource's replicas and up-to-date replicas as this node sees them.
func DRBDResource(res string, st report.Status, upToDate, diskless bool, replicas, upToDateReplicas int) report.Observation {
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

// OVNCentralMember is an ovn-central-member observation of database db
// with status st in a raft cluster of servers.
func OVNCentralMember(db string, st report.Status, servers int) report.Observation {
	return report.Observation{Component: report.ComponentKubeOVN, Check: report.CheckOVNCentralMember, Status: st, Reason: "ClusterMember",
		ResourceRef: &report.ResourceRef{Kind: report.KindOVNDatabase, Name: db},
		Attributes:  map[string]float64{report.AttrRaftServers: float64(servers)}}
}

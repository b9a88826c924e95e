package drain

import (
	"fmt"
	"strings"
	"time"

	"github.com/cozystack/cozy-health/aggregator/internal/state"
	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/pkg/report/reporttest"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// obs builders in the shapes the agent sends (pkg/report/vocabulary.go).
var (
	etcdMember = reporttest.EtcdMember
	membership = reporttest.EtcdMembership
	drbd       = reporttest.DRBDResource
	ovn        = reporttest.OVNCentralMember
)

// etcdMemberAs is a voting member's etcd-member observation with status st
// and the agent's reason.
func etcdMemberAs(st report.Status, reason string) report.Observation {
	o := etcdMember(st, false)
	o.Reason = reason
	return o
}

// alarms is an etcd-alarms observation with the agent's reason
// (NoAlarms, or Alarm<first alarm>).
func alarms(reason string) report.Observation {
	st := report.StatusDown
	if reason == "NoAlarms" {
		st = report.StatusHealthy
	}
	return report.Observation{Component: report.ComponentEtcd, Check: report.CheckEtcdAlarms, Status: st, Reason: reason}
}

func rep(node string, obs ...report.Observation) *report.NodeReport {
	return &report.NodeReport{NodeName: node, AgentInstanceID: "a", Sequence: 1, SentAt: t0, Interval: 5 * time.Second, Observations: obs}
}

// node states. A node named worker* is a worker; every other is labelled
// control-plane (the raft rules believe member claims only there).

func roleOf(node string) state.Role {
	if strings.HasPrefix(node, "worker") {
		return state.RoleWorker
	}
	return state.RoleControlPlane
}

func fresh(node string, obs ...report.Observation) NodeInfo {
	return NodeInfo{Exists: true, LastReport: rep(node, obs...), LastHeard: t0.Add(-2 * time.Second), Fresh: true, FreshUntil: t0.Add(13 * time.Second), Role: roleOf(node)}
}

func stale(node string, obs ...report.Observation) NodeInfo {
	return NodeInfo{Exists: true, LastReport: rep(node, obs...), LastHeard: t0.Add(-time.Minute), Fresh: false, Role: roleOf(node)}
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

// asWorker is n on a Node without the control-plane label.
func asWorker(n NodeInfo) NodeInfo {
	n.Role = state.RoleWorker
	return n
}

func silent(node string) NodeInfo { return NodeInfo{Exists: true, Role: roleOf(node)} }

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

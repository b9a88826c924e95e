// Package draintest builds the nodes a drain check judges (drain.NodeInfo)
// for the tests and benchmarks outside package drain: the drain check's
// server (drainserver) and drain's own benchmarks. The observations come
// from pkg/report/reporttest. A node named worker* is a worker; every
// other is a control-plane Node (the raft rules believe member claims
// only there).
package draintest

import (
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cozystack/cozy-health/aggregator/internal/drain"
	"github.com/cozystack/cozy-health/aggregator/internal/state"
	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/pkg/report/reporttest"
)

// T0 is when every report of these nodes was sent, and the time to judge
// them at.
var T0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// Report is node's report of obs, sent at T0 every 5 s.
func Report(node string, obs ...report.Observation) *report.NodeReport {
	return &report.NodeReport{NodeName: node, AgentInstanceID: "a", Sequence: 1, SentAt: T0, Interval: 5 * time.Second, Observations: obs}
}

// RoleOf is node's role by its name: worker* is a worker, every other a
// control-plane Node.
func RoleOf(node string) state.Role {
	if strings.HasPrefix(node, "worker") {
		return state.RoleWorker
	}
	return state.RoleControlPlane
}

// Fresh is a Kubernetes Node whose agent reported obs 2 s before T0,
// within its heartbeat grace.
func Fresh(node string, obs ...report.Observation) drain.NodeInfo {
	return drain.NodeInfo{Exists: true, LastReport: Report(node, obs...), LastHeard: T0.Add(-2 * time.Second), Fresh: true, FreshUntil: T0.Add(13 * time.Second), Role: RoleOf(node)}
}

// Stale is a Kubernetes Node whose agent last reported obs a minute
// before T0, past its heartbeat grace.
func Stale(node string, obs ...report.Observation) drain.NodeInfo {
	return drain.NodeInfo{Exists: true, LastReport: Report(node, obs...), LastHeard: T0.Add(-time.Minute), Fresh: false, Role: RoleOf(node)}
}

// Cordoned is Fresh on a cordoned Node.
func Cordoned(node string, obs ...report.Observation) drain.NodeInfo {
	n := Fresh(node, obs...)
	n.Cordoned = true
	return n
}

// Silent is a Kubernetes Node whose agent never reported.
func Silent(node string) drain.NodeInfo { return drain.NodeInfo{Exists: true, Role: RoleOf(node)} }

// EtcdCluster builds n control-plane nodes node-1..node-n with healthy
// voting members, then applies the overrides.
func EtcdCluster(n int, override map[string]drain.NodeInfo) map[string]drain.NodeInfo {
	out := map[string]drain.NodeInfo{}
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("node-%d", i)
		out[name] = Fresh(name, reporttest.EtcdMember(report.StatusHealthy, false), reporttest.EtcdMembership(n, 0))
	}
	for k, v := range override {
		out[k] = v
	}
	return out
}

// The simulated cluster of the drain benchmarks.
const (
	BenchNodes            = 5000
	BenchEtcdMembers      = 5
	benchResourcesPerNode = 20
	benchReplicas         = 3 // per resource: 3 diskful, or 2 diskful + 1 diskless tiebreaker
)

// SimulatedCluster builds BenchNodes nodes (node-0000...) with realistic
// reports: BenchEtcdMembers etcd members (one Down), ~20 DRBD resources
// per node with 2-3 diskful replicas (2-replica resources get a diskless
// tiebreaker), the node's other checks, 1% of the nodes stale and 0.5%
// cordoned.
func SimulatedCluster() map[string]drain.NodeInfo {
	rng := rand.New(rand.NewSource(1))
	names := make([]string, BenchNodes)
	obs := make([][]report.Observation, BenchNodes)
	for i := range names {
		names[i] = fmt.Sprintf("node-%04d", i)
		ref := &report.ResourceRef{Kind: report.KindNode, Name: names[i]}
		o := []report.Observation{
			{Component: report.ComponentNode, Check: report.CheckTalosServices, Status: report.StatusHealthy, Reason: "ServicesRunning", ResourceRef: ref},
			{Component: report.ComponentDisk, Check: report.CheckFsyncProbe, Status: report.StatusHealthy, Reason: "FsyncFast", ResourceRef: ref, Attributes: map[string]float64{report.AttrFsyncP99Seconds: 0.002}},
			{Component: report.ComponentDisk, Check: report.CheckDiskstats, Status: report.StatusHealthy, Reason: "LatencyOK", ResourceRef: &report.ResourceRef{Kind: report.KindBlockDevice, Name: "sda"}, Attributes: map[string]float64{report.AttrWriteLatencySeconds: 0.001}},
			{Component: report.ComponentDisk, Check: report.CheckDiskstats, Status: report.StatusHealthy, Reason: "LatencyOK", ResourceRef: &report.ResourceRef{Kind: report.KindBlockDevice, Name: "nvme0n1"}, Attributes: map[string]float64{report.AttrWriteLatencySeconds: 0.0002}},
			{Component: report.ComponentCilium, Check: report.CheckCiliumAgent, Status: report.StatusHealthy, Reason: "Ok", ResourceRef: ref},
			{Component: report.ComponentKubeOVN, Check: report.CheckKubeOVNPinger, Status: report.StatusHealthy, Reason: "PingOK", ResourceRef: ref, Attributes: map[string]float64{report.AttrNodePingLossRatio: 0}},
			{Component: report.ComponentLinstor, Check: report.CheckLinstorSatellite, Status: report.StatusHealthy, Reason: "Online", ResourceRef: ref},
		}
		if i < BenchEtcdMembers {
			st := report.StatusHealthy
			if i == BenchEtcdMembers-1 {
				st = report.StatusDown
			}
			o = append(o, reporttest.EtcdMember(st, false), reporttest.EtcdMembership(BenchEtcdMembers, 0))
		}
		obs[i] = o
	}
	resources := BenchNodes * benchResourcesPerNode / benchReplicas
	for r := 0; r < resources; r++ {
		name := fmt.Sprintf("pvc-%08x", r)
		diskful := 2 + r%2
		holders := make([]int, 0, benchReplicas)
		for len(holders) < benchReplicas {
			if n := rng.Intn(BenchNodes); !slices.Contains(holders, n) {
				holders = append(holders, n)
			}
		}
		for k, n := range holders {
			diskless := k >= diskful
			obs[n] = append(obs[n], reporttest.DRBDResource(name, report.StatusHealthy, !diskless, diskless, benchReplicas, diskful))
		}
	}
	nodes := make(map[string]drain.NodeInfo, BenchNodes)
	for i, n := range names {
		switch {
		case i%100 == 50:
			nodes[n] = Stale(n, obs[i]...)
		case i%200 == 7:
			nodes[n] = Cordoned(n, obs[i]...)
		default:
			nodes[n] = Fresh(n, obs[i]...)
		}
	}
	// Only the etcd members' Nodes are labelled control-plane.
	for i, n := range names {
		if ni, ok := nodes[n]; ok && i >= BenchEtcdMembers {
			ni.Role = state.RoleWorker
			nodes[n] = ni
		}
	}
	return nodes
}

// ReportLatencies reports the quantiles of d (p50-ms, p99-ms, max-ms) as
// b's metrics and logs them.
func ReportLatencies(b *testing.B, d []time.Duration) {
	slices.Sort(d)
	q := func(p float64) float64 { return float64(d[int(p*float64(len(d)-1))]) / float64(time.Millisecond) }
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(q(1), "max-ms")
	b.Logf("%d calls: p50 %.4f ms, p99 %.4f ms, max %.4f ms", len(d), q(0.50), q(0.99), q(1))
}

// ThreadCPU is the calling OS thread's CPU time.
func ThreadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

package drain_test

import (
	"fmt"
	"math"
	"math/rand"
	randv2 "math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/cozystack/cozy-health/aggregator/internal/drain"
	"github.com/cozystack/cozy-health/aggregator/internal/drain/draintest"
	"github.com/cozystack/cozy-health/pkg/linstorapi"
)

// BenchmarkDrainCheck is one drain.Evaluate of every rule for a node picked at
// random (etcd members included) against a 5,000-node snapshot. Besides
// wall-clock quantiles (p50-ms, p99-ms: what a caller waits on this
// machine, shared with other work) it reports the thread CPU time of each
// call (p50-cpu-ms, p99-cpu-ms: the latency without waiting for a core).
func BenchmarkDrainCheck(b *testing.B) {
	s := drain.NewSnapshot(draintest.SimulatedCluster(), draintest.T0)
	rng := rand.New(rand.NewSource(2))
	lat := make([]time.Duration, 0, b.N)
	cpu := make([]time.Duration, 0, b.N)
	verdicts := map[drain.Verdict]int{}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		node := fmt.Sprintf("node-%04d", rng.Intn(draintest.BenchNodes))
		if i%10 == 0 {
			node = fmt.Sprintf("node-%04d", i%draintest.BenchEtcdMembers)
		}
		c0, start := draintest.ThreadCPU(), time.Now()
		res := drain.Evaluate(node, s, draintest.T0)
		lat = append(lat, time.Since(start))
		cpu = append(cpu, draintest.ThreadCPU()-c0)
		verdicts[res.Verdict]++
	}
	b.StopTimer()
	draintest.ReportLatencies(b, lat)
	slices.Sort(cpu)
	q := func(p float64) float64 { return float64(cpu[int(p*float64(len(cpu)-1))]) / float64(time.Millisecond) }
	b.ReportMetric(q(0.50), "p50-cpu-ms")
	b.ReportMetric(q(0.99), "p99-cpu-ms")
	b.Logf("thread CPU per call: p50 %.4f ms, p99 %.4f ms, max %.4f ms; verdicts: %v", q(0.50), q(0.99), q(1), verdicts)
}

// BenchmarkSnapshot5000Nodes is taking and indexing one snapshot of 5,000
// nodes (done when the state changes, at most once per MaxSnapshotAge).
func BenchmarkSnapshot5000Nodes(b *testing.B) {
	nodes := draintest.SimulatedCluster()
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		_ = drain.NewSnapshot(nodes, draintest.T0)
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	draintest.ReportLatencies(b, lat)
}

// BenchmarkSnapshotIncremental5000Nodes is one snapshot after a fifth of
// the nodes sent a new report (one second of 5 s reports), placement
// unchanged: what the Service pays at most once per MaxSnapshotAge.
func BenchmarkSnapshotIncremental5000Nodes(b *testing.B) {
	nodes := draintest.SimulatedCluster()
	names := make([]string, 0, len(nodes))
	for n := range nodes {
		names = append(names, n)
	}
	slices.Sort(names)
	var x drain.Indexer
	x.Snapshot(nodes, draintest.T0)
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		for k := i % 5; k < len(names); k += 5 {
			n := nodes[names[k]]
			r := *n.LastReport
			r.Sequence++
			n.LastReport = &r
			nodes[names[k]] = n
		}
		b.StartTimer()
		start := time.Now()
		_ = x.Snapshot(nodes, draintest.T0)
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	draintest.ReportLatencies(b, lat)
}

// benchGiBKiB is a GiB in KiB, LINSTOR's unit of size.
const benchGiBKiB = int64(1) << 20

// ruleNamed is the rule of rules named name.
func ruleNamed(b *testing.B, rules []drain.Rule, name string) drain.Rule {
	for _, r := range rules {
		if r.Name() == name {
			return r
		}
	}
	b.Fatalf("no rule %s", name)
	return nil
}

// benchPlacement is a 5,000-node controller view: every satellite ONLINE
// with a thin pool of 1 TiB, 20 resources' replicas per node, 3 diskful
// replicas of 2 GiB each.
func benchPlacement() (map[string]drain.NodeInfo, linstorapi.Placement) {
	rng := randv2.New(randv2.NewPCG(5000, 1))
	nodes := make(map[string]drain.NodeInfo, draintest.BenchNodes)
	p := linstorapi.Placement{Satellites: make(map[string]string, draintest.BenchNodes)}
	names := make([]string, draintest.BenchNodes)
	for i := range names {
		names[i] = fmt.Sprintf("node-%04d", i)
		nodes[names[i]] = draintest.Fresh(names[i])
		p.Satellites[names[i]] = "ONLINE"
		p.Pools = append(p.Pools,
			linstorapi.PoolRoom{Node: names[i], Pool: "DfltDisklessStorPool", Kind: "DISKLESS", Class: linstorapi.PoolNoData, FreeKiB: math.MaxInt64, TotalKiB: math.MaxInt64},
			linstorapi.PoolRoom{Node: names[i], Pool: "pool-a", Kind: "LVM_THIN", Class: linstorapi.PoolThin, FreeKiB: 512 * benchGiBKiB, TotalKiB: 1024 * benchGiBKiB})
	}
	resources := draintest.BenchNodes * 20 / 3
	for r := 0; r < resources; r++ {
		res := fmt.Sprintf("pvc-%08x", r)
		var holders []int
		for len(holders) < 3 {
			if n := rng.IntN(draintest.BenchNodes); !slices.Contains(holders, n) {
				holders = append(holders, n)
			}
		}
		for _, n := range holders {
			p.Replicas = append(p.Replicas, linstorapi.Replica{Resource: res, Node: names[n], State: "UpToDate", Pool: "pool-a", SizeKiB: 2 * benchGiBKiB, Satellite: "ONLINE"})
		}
	}
	sort.Slice(p.Replicas, func(i, j int) bool {
		if p.Replicas[i].Resource != p.Replicas[j].Resource {
			return p.Replicas[i].Resource < p.Replicas[j].Resource
		}
		return p.Replicas[i].Node < p.Replicas[j].Node
	})
	return nodes, p
}

// BenchmarkLinstorReplaceable5000Nodes is one linstor-replaceable check of
// a node picked at random (about 20 resources) on a 5,000-node view, in
// thread CPU time (cpu-ms: what it costs without waiting for a core); the
// snapshot's share (indexing the pools and what each holds) is
// BenchmarkPlacementIndex5000Nodes.
func BenchmarkLinstorReplaceable5000Nodes(b *testing.B) {
	nodes, p := benchPlacement()
	s := drain.NewSnapshot(nodes, draintest.T0).WithPlacement(p, "")
	replaceable := ruleNamed(b, drain.DecommissionRules, drain.RuleLinstorReplaceable)
	rng := randv2.New(randv2.NewPCG(2, 2))
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var cpu time.Duration
	safe := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		node := fmt.Sprintf("node-%04d", rng.IntN(draintest.BenchNodes))
		c0 := draintest.ThreadCPU()
		res := drain.EvaluateRules([]drain.Rule{replaceable}, node, s, draintest.T0)
		cpu += draintest.ThreadCPU() - c0
		if res.Verdict == drain.Safe {
			safe++
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(cpu)/float64(b.N)/float64(time.Millisecond), "cpu-ms")
	if safe != b.N {
		b.Fatalf("%d of %d checks safe: every node should find room", safe, b.N)
	}
}

// BenchmarkPlacementIndex5000Nodes is indexing a 5,000-node controller
// view (about 33,000 resources, 100,000 replicas, 10,000 pools) into a
// snapshot, in thread CPU time.
func BenchmarkPlacementIndex5000Nodes(b *testing.B) {
	nodes, p := benchPlacement()
	s := drain.NewSnapshot(nodes, draintest.T0)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var cpu time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c0 := draintest.ThreadCPU()
		_ = s.WithPlacement(p, "")
		cpu += draintest.ThreadCPU() - c0
	}
	b.StopTimer()
	b.ReportMetric(float64(cpu)/float64(b.N)/float64(time.Millisecond), "cpu-ms")
}

// BenchmarkEvaluateAll5000Nodes is one evaluation of the disruption budget
// (every node's reboot verdict, drainserver.Budget's work every period on
// every replica) of the simulated 5,000-node cluster.
func BenchmarkEvaluateAll5000Nodes(b *testing.B) {
	s := drain.NewSnapshot(draintest.SimulatedCluster(), draintest.T0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if got := drain.EvaluateAll(s, draintest.T0); len(got) != draintest.BenchNodes {
			b.Fatalf("%d verdicts, want %d", len(got), draintest.BenchNodes)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/evaluation")
}

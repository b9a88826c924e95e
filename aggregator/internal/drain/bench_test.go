package drain

import (
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"runtime"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cozystack/cozy-health/aggregator/internal/state"
	"github.com/cozystack/cozy-health/pkg/report"
)

const (
	benchNodes            = 5000
	benchEtcdMembers      = 5
	benchResourcesPerNode = 20
	benchReplicas         = 3 // per resource: 3 diskful, or 2 diskful + 1 diskless tiebreaker
)

// simulatedCluster builds benchNodes nodes with realistic reports: 5 etcd
// members (one Down), ~20 DRBD resources per node with 2-3 diskful replicas
// (2-replica resources get a diskless tiebreaker), the node's other checks,
// 1% of the nodes stale and 0.5% cordoned.
func simulatedCluster() map[string]NodeInfo {
	rng := rand.New(rand.NewSource(1))
	names := make([]string, benchNodes)
	obs := make([][]report.Observation, benchNodes)
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
		if i < benchEtcdMembers {
			st := report.StatusHealthy
			if i == benchEtcdMembers-1 {
				st = report.StatusDown
			}
			o = append(o, etcdMember(st, false), membership(benchEtcdMembers, 0))
		}
		obs[i] = o
	}
	resources := benchNodes * benchResourcesPerNode / benchReplicas
	for r := 0; r < resources; r++ {
		name := fmt.Sprintf("pvc-%08x", r)
		diskful := 2 + r%2
		holders := make([]int, 0, benchReplicas)
		for len(holders) < benchReplicas {
			if n := rng.Intn(benchNodes); !slices.Contains(holders, n) {
				holders = append(holders, n)
			}
		}
		for k, n := range holders {
			diskless := k >= diskful
			obs[n] = append(obs[n], drbd(name, report.StatusHealthy, !diskless, diskless, benchReplicas, diskful))
		}
	}
	nodes := make(map[string]NodeInfo, benchNodes)
	for i, n := range names {
		switch {
		case i%100 == 50:
			nodes[n] = stale(n, obs[i]...)
		case i%200 == 7:
			nodes[n] = cordoned(n, obs[i]...)
		default:
			nodes[n] = fresh(n, obs[i]...)
		}
	}
	// Only the etcd members' Nodes are labelled control-plane.
	for i, n := range names {
		if ni, ok := nodes[n]; ok && i >= benchEtcdMembers {
			ni.Role = state.RoleWorker
			nodes[n] = ni
		}
	}
	return nodes
}

func reportLatencies(b *testing.B, d []time.Duration) {
	slices.Sort(d)
	q := func(p float64) float64 { return float64(d[int(p*float64(len(d)-1))]) / float64(time.Millisecond) }
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(q(1), "max-ms")
	b.Logf("%d calls: p50 %.4f ms, p99 %.4f ms, max %.4f ms", len(d), q(0.50), q(0.99), q(1))
}

// threadCPU is the calling OS thread's CPU time.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// BenchmarkDrainCheck is one Evaluate of every rule for a node picked at
// random (etcd members included) against a 5,000-node snapshot. Besides
// wall-clock quantiles (p50-ms, p99-ms: what a caller waits on this
// machine, shared with other work) it reports the thread CPU time of each
// call (p50-cpu-ms, p99-cpu-ms: the latency without waiting for a core).
func BenchmarkDrainCheck(b *testing.B) {
	s := NewSnapshot(simulatedCluster(), t0)
	rng := rand.New(rand.NewSource(2))
	lat := make([]time.Duration, 0, b.N)
	cpu := make([]time.Duration, 0, b.N)
	verdicts := map[Verdict]int{}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		node := fmt.Sprintf("node-%04d", rng.Intn(benchNodes))
		if i%10 == 0 {
			node = fmt.Sprintf("node-%04d", i%benchEtcdMembers)
		}
		c0, start := threadCPU(), time.Now()
		res := Evaluate(node, s, t0)
		lat = append(lat, time.Since(start))
		cpu = append(cpu, threadCPU()-c0)
		verdicts[res.Verdict]++
	}
	b.StopTimer()
	reportLatencies(b, lat)
	slices.Sort(cpu)
	q := func(p float64) float64 { return float64(cpu[int(p*float64(len(cpu)-1))]) / float64(time.Millisecond) }
	b.ReportMetric(q(0.50), "p50-cpu-ms")
	b.ReportMetric(q(0.99), "p99-cpu-ms")
	b.Logf("thread CPU per call: p50 %.4f ms, p99 %.4f ms, max %.4f ms; verdicts: %v", q(0.50), q(0.99), q(1), verdicts)
}

// BenchmarkDrainCheckHTTP is one GET /v1/drain-check over a loopback
// listener through the Service (cached snapshot), JSON encoding included.
func BenchmarkDrainCheckHTTP(b *testing.B) {
	nodes := simulatedCluster()
	svc, err := NewService(Config{MaxSnapshotAge: time.Hour}, func(time.Time) map[string]NodeInfo { return nodes }, nil, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	svc.Snapshot(time.Now())
	base := serveHTTP(b, NewHandler(svc, nil))
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	rng := rand.New(rand.NewSource(3))
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		url := fmt.Sprintf("%s%s?node=node-%04d", base, Path, rng.Intn(benchNodes))
		start := time.Now()
		resp, err := client.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		lat = append(lat, time.Since(start))
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	b.StopTimer()
	reportLatencies(b, lat)
}

// BenchmarkSnapshot5000Nodes is taking and indexing one snapshot of 5,000
// nodes (done when the state changes, at most once per MaxSnapshotAge).
func BenchmarkSnapshot5000Nodes(b *testing.B) {
	nodes := simulatedCluster()
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		_ = NewSnapshot(nodes, t0)
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	reportLatencies(b, lat)
}

// BenchmarkSnapshotIncremental5000Nodes is one snapshot after a fifth of
// the nodes sent a new report (one second of 5 s reports), placement
// unchanged: what the Service pays at most once per MaxSnapshotAge.
func BenchmarkSnapshotIncremental5000Nodes(b *testing.B) {
	nodes := simulatedCluster()
	names := make([]string, 0, len(nodes))
	for n := range nodes {
		names = append(names, n)
	}
	slices.Sort(names)
	var x Indexer
	x.Snapshot(nodes, t0)
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
		_ = x.Snapshot(nodes, t0)
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	reportLatencies(b, lat)
}

package drainserver

import (
	"fmt"
	"math/rand"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cozystack/cozy-health/aggregator/internal/drain"
	"github.com/cozystack/cozy-health/aggregator/internal/drain/draintest"
	"github.com/cozystack/cozy-health/aggregator/internal/state"
	"github.com/cozystack/cozy-health/pkg/report"
)

// churningState is simulatedCluster's 5,000 nodes in a state.State, with a
// Source over it as the aggregator's (StateNodes, every node a Kubernetes
// Node) and next, which returns a node's next report (its latest with the
// sequence bumped), as an agent sends it.
func churningState(b *testing.B) (*state.State, Source, func(rng *rand.Rand) *report.NodeReport) {
	b.Helper()
	nodes := draintest.SimulatedCluster()
	st := state.New(nil)
	kube := make(map[string]drain.KubeNode, len(nodes))
	names := make([]string, 0, len(nodes))
	for name, n := range nodes {
		names = append(names, name)
		kube[name] = drain.KubeNode{Cordoned: n.Cordoned, Role: n.Role}
		st.SetRole(name, n.Role)
		at := t0
		if !n.Fresh {
			at = t0.Add(-time.Minute)
		}
		st.Accept(n.LastReport, at)
	}
	slices.Sort(names)
	grace := func(time.Duration) time.Duration { return 15 * time.Second }
	source := func(now time.Time) map[string]drain.NodeInfo { return drain.StateNodes(st, now, kube, grace) }
	var mu sync.Mutex
	next := func(rng *rand.Rand) *report.NodeReport {
		mu.Lock()
		defer mu.Unlock()
		name := names[rng.Intn(len(names))]
		e, _ := st.Get(name)
		r := *e.Report
		r.Sequence++
		return &r
	}
	return st, source, next
}

// BenchmarkDrainCheckAfterReport is one Service.Check on 5,000 nodes right
// after the state accepted one new report: the worst case of answering
// from a snapshot that holds every report accepted before the check
// (Config.Generation), an incremental snapshot per check. Wall-clock and
// thread CPU quantiles as BenchmarkDrainCheck.
func BenchmarkDrainCheckAfterReport(b *testing.B) {
	st, source, next := churningState(b)
	svc, err := NewService(Config{MaxSnapshotAge: time.Hour, Generation: st.Generation}, source, fixedClock{t0}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	svc.Snapshot(t0)
	rng := rand.New(rand.NewSource(2))
	lat := make([]time.Duration, 0, b.N)
	cpu := make([]time.Duration, 0, b.N)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		st.Accept(next(rng), t0)
		node := fmt.Sprintf("node-%04d", rng.Intn(draintest.BenchNodes))
		b.StartTimer()
		c0, start := draintest.ThreadCPU(), time.Now()
		if _, err := svc.Check(node, "bench"); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
		cpu = append(cpu, draintest.ThreadCPU()-c0)
	}
	b.StopTimer()
	draintest.ReportLatencies(b, lat)
	slices.Sort(cpu)
	q := func(p float64) float64 { return float64(cpu[int(p*float64(len(cpu)-1))]) / float64(time.Millisecond) }
	b.ReportMetric(q(0.50), "p50-cpu-ms")
	b.ReportMetric(q(0.99), "p99-cpu-ms")
}

// BenchmarkDrainCheckFlood is checks from 8 goroutines per core as fast as
// they go on 5,000 nodes while the state accepts 1,000 reports a second
// (5,000 nodes reporting every 5 s): snapshots-per-s is how many snapshots
// the flood made the Service take (at most one at a time, each serving
// every check that arrived before it began).
func BenchmarkDrainCheckFlood(b *testing.B) {
	st, source, next := churningState(b)
	svc, err := NewService(Config{MaxSnapshotAge: time.Hour, Generation: st.Generation}, source, fixedClock{t0}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	var snapshots atomic.Int64
	svc.source = func(now time.Time) map[string]drain.NodeInfo { snapshots.Add(1); return source(now) }
	svc.Snapshot(t0)
	snapshots.Store(0)
	stop := make(chan struct{})
	var feeder sync.WaitGroup
	feeder.Add(1)
	go func() {
		defer feeder.Done()
		rng := rand.New(rand.NewSource(5))
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				st.Accept(next(rng), t0)
			}
		}
	}()
	var mu sync.Mutex
	var lat []time.Duration
	var seed atomic.Int64
	b.SetParallelism(8)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewSource(seed.Add(1)))
		var mine []time.Duration
		for pb.Next() {
			s := time.Now()
			if _, err := svc.Check(fmt.Sprintf("node-%04d", rng.Intn(draintest.BenchNodes)), "bench"); err != nil {
				b.Error(err)
				return
			}
			mine = append(mine, time.Since(s))
		}
		mu.Lock()
		lat = append(lat, mine...)
		mu.Unlock()
	})
	elapsed := time.Since(start)
	b.StopTimer()
	close(stop)
	feeder.Wait()
	draintest.ReportLatencies(b, lat)
	b.ReportMetric(float64(snapshots.Load())/elapsed.Seconds(), "snapshots-per-s")
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "checks-per-s")
}

// fixedClock is a clock.PassiveClock stopped at t.
type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time                  { return c.t }
func (c fixedClock) Since(t time.Time) time.Duration { return c.t.Sub(t) }

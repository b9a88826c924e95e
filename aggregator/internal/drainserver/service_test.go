package drainserver

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/cozystack/cozy-health/aggregator/internal/drain"
	"github.com/cozystack/cozy-health/aggregator/internal/drain/draintest"
	"github.com/cozystack/cozy-health/aggregator/internal/quorum"
	"github.com/cozystack/cozy-health/aggregator/internal/state"
	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/pkg/report/reporttest"
	"github.com/prometheus/client_golang/prometheus"
)

// stateCluster is a state holding node-1..node-3, control-plane Nodes with
// healthy voting etcd members reported at at (sequence 1), and a Source
// over it as the aggregator's (StateNodes; grace 15s) that counts its
// calls.
func stateCluster(at time.Time) (*state.State, Source, *atomic.Int64) {
	st := state.New(nil)
	kube := map[string]drain.KubeNode{}
	for _, n := range []string{"node-1", "node-2", "node-3"} {
		kube[n] = drain.KubeNode{Role: state.RoleControlPlane}
		st.Accept(memberReport(n, 1, report.StatusHealthy), at)
	}
	var calls atomic.Int64
	grace := func(time.Duration) time.Duration { return 15 * time.Second }
	return st, func(now time.Time) map[string]drain.NodeInfo {
		calls.Add(1)
		return drain.StateNodes(st, now, kube, grace)
	}, &calls
}

// memberReport is node's report, sequence seq, of a voting etcd member with
// status st in a 3-member cluster.
func memberReport(node string, seq uint64, st report.Status) *report.NodeReport {
	return &report.NodeReport{NodeName: node, AgentInstanceID: "agent-" + node, Sequence: seq, Interval: 5 * time.Second,
		Observations: []report.Observation{reporttest.EtcdMember(st, false), reporttest.EtcdMembership(3, 0)}}
}

// TestCheckIsNeverOlderThanTheStatesReports is issue 34 item 9: etcd's
// Health object already named node-2 Down and drain-check node-1 answered
// safe from a snapshot taken before node-2's report. A report the state
// accepted before a check arrived is in the check's answer, however young
// the cached snapshot (here 100 ms of a 1 s MaxSnapshotAge, on a fake clock);
// before, the check answered safe from the earlier snapshot.
func TestCheckIsNeverOlderThanTheStatesReports(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	st, source, calls := stateCluster(t0)
	svc, err := NewService(Config{MaxSnapshotAge: time.Second, Generation: st.Generation}, source, clk, nil, nil)
	require.NoError(t, err)

	res, err := svc.Check("node-1", "test")
	require.NoError(t, err)
	require.Equal(t, drain.Safe, res.Verdict, "a healthy cluster: %+v", res.Reasons)
	res, err = svc.Check("node-3", "test")
	require.NoError(t, err)
	require.Equal(t, drain.Safe, res.Verdict)
	assert.EqualValues(t, 1, calls.Load(), "nothing changed: the second check reuses the snapshot")

	// node-2's member goes Down; the state accepts its report 100 ms later.
	clk.Step(100 * time.Millisecond)
	st.Accept(memberReport("node-2", 2, report.StatusDown), clk.Now())
	res, err = svc.Check("node-1", "test")
	require.NoError(t, err)
	assert.Equal(t, drain.Blocked, res.Verdict, "node-2's Down report was accepted before the check: draining node-1 leaves 1 of 3 voters; got %+v", res.Reasons)
	assert.Equal(t, clk.Now(), res.SnapshotAt, "answered from a snapshot taken after the report")
	assert.EqualValues(t, 2, calls.Load())

	// And back: a heal is seen as soon, and an unchanged state costs nothing.
	clk.Step(100 * time.Millisecond)
	st.Accept(memberReport("node-2", 3, report.StatusHealthy), clk.Now())
	res, err = svc.Check("node-1", "test")
	require.NoError(t, err)
	assert.Equal(t, drain.Safe, res.Verdict, "%+v", res.Reasons)
	for i := 0; i < 10; i++ {
		_, err = svc.Check("node-2", "test")
		require.NoError(t, err)
	}
	assert.EqualValues(t, 3, calls.Load(), "one snapshot per change of the state, none per check")

	// A stale report is ignored by the state (sequence): no new snapshot.
	st.Accept(memberReport("node-2", 1, report.StatusDown), clk.Now())
	_, err = svc.Check("node-1", "test")
	require.NoError(t, err)
	assert.EqualValues(t, 3, calls.Load(), "a report the state refused changes nothing")
}

// TestCheckWaitsForASnapshotBegunAfterTheReport: a snapshot begun before a
// report is not good enough for a check that arrived after the report,
// even when that check found it being taken: it waits for it and then takes
// the next one. Checks arriving while a snapshot is taken are all served by
// it or by one after it (no snapshot per check).
func TestCheckWaitsForASnapshotBegunAfterTheReport(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	st, inner, calls := stateCluster(t0)
	read := make(chan struct{}, 1)
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(releaseAll) // a failed test does not leave the snapshot stalled
	var block atomic.Bool
	source := func(now time.Time) map[string]drain.NodeInfo {
		nodes := inner(now)
		if block.CompareAndSwap(true, false) {
			read <- struct{}{} // the state is read; hold the snapshot here
			<-release
		}
		return nodes
	}
	svc, err := NewService(Config{MaxSnapshotAge: time.Second, Generation: st.Generation}, source, clk, nil, nil)
	require.NoError(t, err)
	res, err := svc.Check("node-1", "test")
	require.NoError(t, err)
	require.Equal(t, drain.Safe, res.Verdict)

	// A snapshot (Run's tick, 1.5 s later) reads the state, then stalls.
	clk.Step(1500 * time.Millisecond)
	block.Store(true)
	go svc.Snapshot(clk.Now())
	<-read
	// Meanwhile node-2's Down report is accepted, and checks arrive.
	st.Accept(memberReport("node-2", 2, report.StatusDown), clk.Now())
	const checks = 20
	var wg sync.WaitGroup
	verdicts := make(chan drain.Verdict, checks)
	for i := 0; i < checks; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := svc.Check("node-1", "test")
			assert.NoError(t, err)
			verdicts <- res.Verdict
		}()
	}
	// None answers from the stalled snapshot (nor from the 1.5 s old one).
	select {
	case v := <-verdicts:
		t.Fatalf("a check answered %s before a snapshot holding the report was taken", v)
	case <-time.After(200 * time.Millisecond):
	}
	releaseAll()
	wg.Wait()
	close(verdicts)
	for v := range verdicts {
		assert.Equal(t, drain.Blocked, v)
	}
	assert.EqualValues(t, 3, calls.Load(), "the stalled snapshot and one after the report serve all %d checks", checks)
}

// TestSnapshotWithoutGenerationIsAgeBound: a Service without
// Config.Generation (a Source that changes only with time) keeps its
// snapshot for MaxSnapshotAge, as before.
func TestSnapshotWithoutGenerationIsAgeBound(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	st, source, calls := stateCluster(t0)
	svc, err := NewService(Config{MaxSnapshotAge: time.Second}, source, clk, nil, nil)
	require.NoError(t, err)
	first := svc.Snapshot(clk.Now())
	st.Accept(memberReport("node-2", 2, report.StatusDown), clk.Now())
	assert.Same(t, first, svc.Snapshot(clk.Now()))
	clk.Step(1001 * time.Millisecond)
	assert.NotSame(t, first, svc.Snapshot(clk.Now()))
	assert.EqualValues(t, 2, calls.Load())
}

// TestServiceCountsRejectedClaims: a DRBD replica claim no other holder
// corroborates is counted once (cozy_health_claims_rejected_total) however
// often it is judged.
func TestServiceCountsRejectedClaims(t *testing.T) {
	nodes := map[string]drain.NodeInfo{
		"node-1":   draintest.Fresh("node-1", reporttest.DRBDResource("pvc-a", report.StatusHealthy, true, false, 2, 1)),
		"node-2":   draintest.Fresh("node-2", reporttest.DRBDResource("pvc-a", report.StatusDegraded, false, false, 2, 1)),
		"worker-1": draintest.Fresh("worker-1", reporttest.DRBDResource("pvc-a", report.StatusHealthy, true, false, 3, 2)),
	}
	reg := prometheus.NewRegistry()
	clk := clocktesting.NewFakeClock(t0)
	aud, err := quorum.NewAuditor(reg, nil, clk.Now)
	require.NoError(t, err)
	svc, err := NewService(Config{Auditor: aud}, func(_ time.Time) map[string]drain.NodeInfo { return nodes }, clk, nil, nil)
	require.NoError(t, err)
	for range 3 {
		res, err := svc.Check("node-1", "http")
		require.NoError(t, err)
		assert.Equal(t, drain.Unknown, res.Verdict)
	}
	mfs, err := reg.Gather()
	require.NoError(t, err)
	require.Len(t, mfs, 1)
	assert.InDelta(t, 1, mfs[0].GetMetric()[0].GetCounter().GetValue(), 0)
	assert.Equal(t, "kind", mfs[0].GetMetric()[0].GetLabel()[0].GetName())
	assert.Equal(t, drain.KindDRBDReplica, mfs[0].GetMetric()[0].GetLabel()[0].GetValue())
}

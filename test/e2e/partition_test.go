package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	healthv1alpha1 "github.com/cozystack/cozy-health/pkg/apis/health/v1alpha1"
	"github.com/cozystack/cozy-health/pkg/drainapi"
	"github.com/cozystack/cozy-health/test/harness"
	"github.com/cozystack/cozy-health/test/lab"
)

// Partial partition bounds (issue 36 item 2), from the mechanism with the
// lab's 2 s report interval I:
//
//   - cut -> ReplicaPartitioned: the leader's last direct report of node-3
//     arrived at most I before the cut; the peer sync asks for a node not
//     heard directly for 1.5 I, on its round every I, so the relayed report
//     is stored at most 2.5 I after the cut; the next rollup (every I) sees
//     it relayed and the writer's token bucket and the apiserver write
//     follow: 3.5 I + ~1 s = 8 s nominal. Measured 3.1 s (gauge 1 at
//     3.1 s). The bound leaves 2.5x for a loaded 2-core machine.
//   - heal -> cleared: the relay closes the connections that lived through
//     the cut, the agent dials again (its reconnect backoff), its next
//     direct report replaces the relayed one, then a rollup and a write;
//     the sync round sets the gauge to 0. Measured 5.1 s (gauge 0 at
//     5.2 s).
const (
	boundPartitioned = 20 * time.Second
	boundPartHealed  = 30 * time.Second
)

// TestPartialPartition cuts node-3 from the Lease holder alone. The other
// replicas still hear it; the leader asks them for node-3's latest signed
// report, verifies it again, and keeps node-3's entries as node-3 said
// (Healthy, never Unknown); the node Health object records the cut path
// (Observation, ReplicaPartitioned, naming the leader and node-3), and the
// leader's cozy_health_replica_unheard_nodes reads 1. Drain-check of node-3
// on the leader answers as before the cut. Healed, the condition clears and
// the gauge reads 0.
func TestPartialPartition(t *testing.T) {
	harness.SkipShort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	l := upLab(ctx, t)
	dir := l.State.Dir

	took, err := l.WaitFor(ctx, nil, "all Healthy", boundRecover, lab.AllHealthy(components))
	require.NoError(t, err)
	t.Logf("all Healthy after %s", took.Round(100*time.Millisecond))

	leader, err := lab.LeaderIdentity(ctx, l.State)
	require.NoError(t, err)
	var agg *lab.Aggregator
	for i := range l.State.Aggregators {
		if l.State.Aggregators[i].Name == leader {
			agg = &l.State.Aggregators[i]
		}
	}
	require.NotNil(t, agg, "the Lease holder %q is one of the lab's replicas", leader)
	metrics := "http://" + agg.Metrics + "/metrics"
	unheard := func() float64 {
		return scrapeValue(t, ctx, metrics, "cozy_health_replica_unheard_nodes", map[string]string{"replica": leader})
	}
	assert.Zero(t, unheard(), "the leader hears every node before the cut")
	before := drainCheck(t, ctx, "http://"+agg.HTTP, "node-3")
	t.Logf("drain-check node-3 on %s before the cut: %s", leader, before.Verdict)
	require.Equal(t, drainapi.Verdict("safe"), before.Verdict, "%+v", before)

	// Every poll from the cut on: node-3's entries are Healthy, never
	// Unknown (the relayed reports keep them true).
	var mu sync.Mutex
	var lapses []string
	node3Healthy := func(hs map[string]*healthv1alpha1.Health, now time.Time) {
		for _, c := range components {
			h, ok := hs[c]
			if !ok {
				continue
			}
			if st, ok := h.Status.Nodes["node-3"]; ok && st.Status != healthv1alpha1.StatusHealthy {
				mu.Lock()
				lapses = append(lapses, fmt.Sprintf("%s %s/node-3 %s %s", now.Format(time.RFC3339Nano), c, st.Status, st.Reason))
				mu.Unlock()
			}
		}
	}
	watching := func(cond lab.Condition) lab.Condition {
		return func(hs map[string]*healthv1alpha1.Health, now time.Time) (bool, string) {
			node3Healthy(hs, now)
			return cond(hs, now)
		}
	}

	msg, err := lab.Fault(ctx, dir, "node-3", "partition-from", leader)
	require.NoError(t, err)
	t.Log(msg)
	cut := time.Now()
	healed := false
	defer func() {
		if !healed {
			_, _ = lab.Fault(ctx, dir, "node-3", "partition-heal", "")
		}
	}()

	took, err = l.WaitFor(ctx, nil, "ReplicaPartitioned", boundPartitioned, watching(partitioned(leader, "node-3")))
	require.NoError(t, err)
	t.Logf("ReplicaPartitioned (naming %s and node-3) after %s (bound %s)", leader, took.Round(100*time.Millisecond), boundPartitioned)
	gauge := waitGauge(t, ctx, unheard, 1, boundPartitioned-time.Since(cut))
	t.Logf("cozy_health_replica_unheard_nodes{replica=%s} %v at %s after the cut", leader, gauge, time.Since(cut).Round(100*time.Millisecond))

	// Through the cut (several heartbeat graces: a relayed report that
	// stopped would read Unknown within 6 s), node-3 stays as it said, and
	// its drain answer stays.
	hold := 15 * time.Second
	_, err = l.WaitFor(ctx, nil, "node-3 held through the cut", hold, watching(func(map[string]*healthv1alpha1.Health, time.Time) (bool, string) {
		return false, "holding"
	}))
	require.Error(t, err, "the hold runs its whole length")
	assert.Equal(t, float64(1), unheard())
	during := drainCheck(t, ctx, "http://"+agg.HTTP, "node-3")
	t.Logf("drain-check node-3 on %s during the cut: %s", leader, during.Verdict)
	assert.Equal(t, before.Verdict, during.Verdict, "the relayed report keeps the drain answer: %+v", during)
	hs, err := l.Healths(ctx)
	require.NoError(t, err)
	node3Healthy(hs, time.Now())
	assert.True(t, partitionedNow(hs, leader, "node-3"), "still ReplicaPartitioned")

	msg, err = lab.Fault(ctx, dir, "node-3", "partition-heal", "")
	require.NoError(t, err)
	healed = true
	t.Log(msg)
	heal := time.Now()
	took, err = l.WaitFor(ctx, nil, "ReplicaPartitioned cleared", boundPartHealed, watching(func(hs map[string]*healthv1alpha1.Health, _ time.Time) (bool, string) {
		return !partitionedNow(hs, "", ""), "node Observation condition"
	}))
	require.NoError(t, err)
	t.Logf("ReplicaPartitioned cleared after %s (bound %s)", took.Round(100*time.Millisecond), boundPartHealed)
	gauge = waitGauge(t, ctx, unheard, 0, boundPartHealed-time.Since(heal))
	t.Logf("cozy_health_replica_unheard_nodes{replica=%s} %v at %s after the heal", leader, gauge, time.Since(heal).Round(100*time.Millisecond))

	mu.Lock()
	defer mu.Unlock()
	assert.Empty(t, lapses, "node-3's entries read Healthy at every poll through the cut and the heal")
}

// partitioned holds when the node Health object carries the Observation
// condition ReplicaPartitioned whose message names replica and node.
func partitioned(replica, node string) lab.Condition {
	return lab.ConditionIs("node", lab.ConditionWant{Type: "Observation", NoRef: true, Status: healthv1alpha1.ConditionTrue,
		Reason: "ReplicaPartitioned", MessageHas: []string{replica, node}})
}

// partitionedNow tells whether the node object reads ReplicaPartitioned
// (naming replica and node unless empty).
func partitionedNow(hs map[string]*healthv1alpha1.Health, replica, node string) bool {
	ok, _ := lab.ConditionIs("node", lab.ConditionWant{Type: "Observation", Reason: "ReplicaPartitioned", MessageHas: []string{replica, node}})(hs, time.Time{})
	return ok
}

// waitGauge polls read until it returns want, within bound.
func waitGauge(t *testing.T, ctx context.Context, read func() float64, want float64, bound time.Duration) float64 {
	t.Helper()
	deadline := time.Now().Add(max(bound, 2*time.Second))
	for {
		v := read()
		if v == want || time.Now().After(deadline) {
			require.Equal(t, want, v, "within %s", bound)
			return v
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

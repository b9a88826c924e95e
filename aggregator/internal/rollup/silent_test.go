package rollup

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/aggregator/internal/state"
	"github.com/cozystack/cozy-health/aggregator/internal/status"
	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/pkg/report/reporttest"
)

// silentRollup is one rollup as the engine publishes it (Engine's
// recompute): Compute, damping, compaction, stamping.
func silentRollup(snap state.Snapshot, now time.Time, cfg Config, cache *Cache, d *Damper) map[string]*status.Component {
	out := ComputeCached(snap, now, cfg, cache)
	for _, comp := range report.NodeComponents {
		d.Apply(out[comp], now)
		Compact(out[comp], DefaultMaxListed)
		d.Stamp(out[comp], now)
	}
	return out
}

// silentNodeState says how node reads in one published component, for
// failure messages: its status.nodes entry and its Heartbeat condition.
func silentNodeState(cs *status.Component, node string) (entry status.NodeState, hb *status.Condition, degraded bool) {
	entry = cs.Nodes[node]
	for i := range cs.Conditions {
		c := &cs.Conditions[i]
		if c.Type == TypeHeartbeat && c.Node == node {
			hb = c
		}
	}
	for _, n := range cs.DegradedNodes {
		degraded = degraded || n == node
	}
	return entry, hb, degraded
}

// TestSilentNodeUnknownEverywhereInOneRollup: when a node's agent falls
// silent, the very rollup that finds it past its grace publishes it
// Unknown/HeartbeatMissed in every node-local component at once — its
// status.nodes entry, a Heartbeat condition pinned to it, and the
// degradedNodes column — and no rollup before that publishes it in any.
// The rollup never leaves one component (the `node` one of the demo's step
// 3) green while the others read the node Unknown: what a reader sees
// between the two is only the writer's queue (TestSilentNodeReachesEveryObject
// in aggregator/internal/app bounds that). It holds with the chart's
// damping (Unknown not held), with an Unknown hold (every component waits
// for the same hold, from the same rollup), and when the silent node was
// already Degraded somewhere (Unknown ranks below Degraded, so that
// entry turns Unknown at once too).
func TestSilentNodeUnknownEverywhereInOneRollup(t *testing.T) {
	const silent = "node-3"
	nodes := []string{"node-1", "node-2", silent}
	cfg := Config{DefaultInterval: 2 * time.Second, FreshForMultiple: 9}
	grace := cfg.Grace(2 * time.Second)
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

	for _, tc := range []struct {
		name  string
		holds Holds
		// degradedOn, when set, is a component the silent node reports
		// Degraded before it falls silent.
		degradedOn string
	}{
		{name: "chart damping", holds: Holds{Degraded: 10 * time.Second}},
		{name: "Unknown held 3s", holds: Holds{Degraded: 10 * time.Second, Unknown: 3 * time.Second}},
		{name: "silent node was Degraded in linstor", holds: Holds{}, degradedOn: report.ComponentLinstor},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := state.New(nil)
			cache, damper := NewCache(), NewDamper(tc.holds)
			now := start
			var seq uint64
			send := func(names ...string) {
				seq++
				for _, n := range names {
					r := reporttest.LabNode(n, seq, now, 2*time.Second)
					if n == silent && tc.degradedOn != "" {
						for i := range r.Observations {
							if r.Observations[i].Component == tc.degradedOn && r.Observations[i].ResourceRef == nil {
								r.Observations[i].Status, r.Observations[i].Reason, r.Observations[i].Message = report.StatusDegraded, "SatelliteSlow", "slow"
								break
							}
						}
					}
					st.Accept(r, now)
				}
			}
			send(nodes...)
			lastHeard := now
			out := silentRollup(st.Snapshot(), now, cfg, cache, damper)
			for _, comp := range report.NodeComponents {
				want := report.StatusHealthy
				if comp == tc.degradedOn {
					want = report.StatusDegraded
				}
				require.Equal(t, want, out[comp].Nodes[silent].Status, "%s before the silence", comp)
			}

			// The silent node's last report was that one; the others go on
			// every 2 s while the engine rolls up every 500 ms and at the
			// heartbeat deadline (Engine.Run). unknownAt is, per
			// component, the first rollup that published the silent node
			// Unknown/HeartbeatMissed.
			unknownAt := map[string]time.Time{}
			staleAt := lastHeard.Add(grace + time.Nanosecond)
			for end := lastHeard.Add(grace + tc.holds.Unknown + 10*time.Second); now.Before(end); {
				next := now.Add(500 * time.Millisecond)
				if staleAt.After(now) && staleAt.Before(next) {
					checkOneRollup(t, silentRollup(st.Snapshot(), staleAt, cfg, cache, damper), silent, staleAt, unknownAt)
				}
				now = next
				if now.Sub(start)%(2*time.Second) == 0 {
					send("node-1", "node-2")
				}
				checkOneRollup(t, silentRollup(st.Snapshot(), now, cfg, cache, damper), silent, now, unknownAt)
			}

			require.Len(t, unknownAt, len(report.NodeComponents), "every node-local component publishes the silent node Unknown: %v", unknownAt)
			first := unknownAt[report.ComponentNode]
			for comp, at := range unknownAt {
				assert.Equal(t, first, at, "%s published %s Unknown in another rollup than node did", comp, silent)
			}
			// Not before its grace (plus the Unknown hold), and at the first
			// rollup after: the engine rolls up at the heartbeat deadline.
			assert.True(t, first.After(lastHeard.Add(grace+tc.holds.Unknown)), "published at %s, before grace+hold ran out", first.Sub(lastHeard))
			assert.LessOrEqual(t, first.Sub(lastHeard), grace+tc.holds.Unknown+500*time.Millisecond, "published the first rollup after grace+hold")
		})
	}
}

// checkOneRollup checks one published rollup: the silent node is either
// Unknown/HeartbeatMissed in every node-local component or in none, and
// records when each first published it so.
func checkOneRollup(t *testing.T, out map[string]*status.Component, silent string, at time.Time, unknownAt map[string]time.Time) {
	t.Helper()
	var unknown, other []string
	for _, comp := range report.NodeComponents {
		cs := out[comp]
		require.NotNil(t, cs, comp)
		entry, hb, degraded := silentNodeState(cs, silent)
		state := fmt.Sprintf("%s: entry %s/%s, degradedNodes has it %v, heartbeat %+v, overall %s", comp, entry.Status, entry.Reason, degraded, hb, cs.Overall)
		if entry.Status == report.StatusUnknown && entry.Reason == report.ReasonHeartbeatMissed {
			unknown = append(unknown, state)
			// The whole fact, not only the entry: the condition a reader
			// filters on, pinned to the node, and the printer column.
			if assert.NotNil(t, hb, "%s: a Heartbeat condition pinned to %s", comp, silent) {
				assert.Equal(t, report.StatusUnknown, hb.Severity, comp)
				assert.Equal(t, report.ReasonHeartbeatMissed, hb.Reason, comp)
				assert.False(t, hb.LastTransition.IsZero(), comp)
			}
			assert.True(t, degraded, "%s: degradedNodes names %s", comp, silent)
			assert.NotEqual(t, report.StatusHealthy, cs.Overall, "%s: a node nobody observes never leaves the component green", comp)
			assert.False(t, entry.LastReportAt.IsZero(), "%s: the entry says when %s was last heard", comp, silent)
			if _, seen := unknownAt[comp]; !seen {
				unknownAt[comp] = at
			}
			continue
		}
		other = append(other, state)
	}
	if len(unknown) > 0 && len(other) > 0 {
		t.Fatalf("at %s one rollup publishes %s Unknown in some components only:\n  Unknown: %v\n  not: %v", at.Format(time.RFC3339Nano), silent, unknown, other)
	}
}

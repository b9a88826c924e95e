package rollup

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/aggregator/internal/status"
	"github.com/cozystack/cozy-health/pkg/linstorapi"
	"github.com/cozystack/cozy-health/pkg/report"
)

// central is the LINSTOR controller's view as the aggregator's adapter
// hands it over: nodes a, b, c with their connection statuses, and the
// replicas of pvc-1 (a, b diskful, c diskless) in the given states.
func central(at time.Time, status map[string]string, states map[string]string) *ClusterFacts {
	var nodes []linstorapi.Node
	for _, n := range []string{"a", "b", "c"} {
		nodes = append(nodes, linstorapi.Node{Name: n, Type: "SATELLITE", ConnectionStatus: status[n]})
	}
	reps := []linstorapi.Replica{
		{Resource: "pvc-1", Node: "a", State: states["a"]},
		{Resource: "pvc-1", Node: "b", State: states["b"]},
		{Resource: "pvc-1", Node: "c", State: "Diskless", Diskless: true},
	}
	return &ClusterFacts{Component: report.ComponentLinstor, Type: "LinstorController", Gen: 1,
		ObservedAt: at, FreshUntil: at.Add(15 * time.Second), Message: "read from http://controller",
		Nodes: linstorapi.Observations(nodes, reps, nil)}
}

var online = map[string]string{"a": "ONLINE", "b": "ONLINE", "c": "ONLINE"}

func TestClusterGolden(t *testing.T) {
	upToDate := map[string]string{"a": "UpToDate", "b": "UpToDate"}
	stale := central(t0.Add(-time.Minute), online, upToDate)
	failing := &ClusterFacts{Component: report.ComponentLinstor, Type: "LinstorController", Reason: "ViewNeverRead",
		Message: "the LINSTOR controller's view has not been read since 2026-11-30T11:59:00Z: dial tcp: connection refused"}
	agentsOnly := snap(worker(node("a", time.Second, ob(report.ComponentNode, report.CheckTalosServices, H, "ServicesRunning"))),
		worker(node("b", time.Second, ob(report.ComponentNode, report.CheckTalosServices, H, "ServicesRunning"))))
	for _, tc := range []struct {
		name string
		cf   *ClusterFacts
		// agents: the agents' reports (none report linstor unless set).
		agents map[string][]report.Observation
	}{
		{name: "linstor-central-healthy", cf: central(t0.Add(-2*time.Second), online, upToDate)},
		{name: "linstor-central-satellite-offline", cf: central(t0.Add(-2*time.Second), map[string]string{"a": "ONLINE", "b": "OFFLINE", "c": "ONLINE"}, map[string]string{"a": "UpToDate"})},
		{name: "linstor-central-all-offline", cf: central(t0.Add(-2*time.Second), map[string]string{"a": "OFFLINE", "b": "OFFLINE", "c": "OFFLINE"}, nil)},
		{name: "linstor-central-outdated", cf: central(t0.Add(-2*time.Second), online, map[string]string{"a": "UpToDate", "b": "Outdated"})},
		{name: "linstor-central-stale", cf: stale},
		{name: "linstor-central-never-read", cf: failing},
		// An agent with drbdsetup reports the same resource: one condition
		// per (type, node, resource), the worse; the node's state the
		// worse of both.
		{name: "linstor-central-and-drbdsetup", cf: central(t0.Add(-2*time.Second), online, upToDate),
			agents: map[string][]report.Observation{"a": {drbd("pvc-1", G, "DiskInconsistent")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := agentsOnly
			if tc.agents != nil {
				s = snap(worker(node("a", time.Second, append([]report.Observation{ob(report.ComponentNode, report.CheckTalosServices, H, "ServicesRunning")}, tc.agents["a"]...)...)),
					worker(node("b", time.Second, ob(report.ComponentNode, report.CheckTalosServices, H, "ServicesRunning"))))
			}
			out := Compute(s, t0, defaultCfg)
			MergeCluster(out[report.ComponentLinstor], tc.cf, t0, defaultCfg)
			for _, cs := range out {
				Compact(cs, DefaultMaxListed)
			}
			got := render(out, []string{report.ComponentLinstor})
			path := filepath.Join("testdata", tc.name+".golden")
			if *update {
				require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
				return
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "run go test ./aggregator/internal/rollup -update")
			assert.Equal(t, string(want), got)
		})
	}
}

// The contract's invariants on the merged component: stale central facts
// never read Healthy, and the component is never fresher than its stalest
// source.
func TestMergeClusterContract(t *testing.T) {
	upToDate := map[string]string{"a": "UpToDate", "b": "UpToDate"}
	s := snap(worker(node("a", time.Second, drbd("pvc-1", H, "DiskUpToDate"))))

	fresh := central(t0.Add(-5*time.Second), online, upToDate)
	out := Compute(s, t0, defaultCfg)
	agentsFreshUntil := out[report.ComponentLinstor].FreshUntil
	MergeCluster(out[report.ComponentLinstor], fresh, t0, defaultCfg)
	cs := out[report.ComponentLinstor]
	assert.Equal(t, report.StatusHealthy, cs.Overall)
	assert.Equal(t, fresh.ObservedAt, cs.ObservedAt, "the central read is older than a's report")
	assert.Equal(t, fresh.ObservedAt.Add(30*time.Second), cs.FreshUntil, "the written bound is the rollup's (6 x 5 s) from the read, as for the agents' facts")
	assert.True(t, cs.FreshUntil.Before(agentsFreshUntil))

	// The same facts, read past their freshness: Unknown, with the reason.
	late := t0.Add(time.Minute)
	out = Compute(s, late, defaultCfg)
	MergeCluster(out[report.ComponentLinstor], fresh, late, defaultCfg)
	cs = out[report.ComponentLinstor]
	assert.Equal(t, report.StatusUnknown, cs.Overall)
	var src *status.Condition
	for i := range cs.Conditions {
		if cs.Conditions[i].Type == "LinstorController" {
			src = &cs.Conditions[i]
		}
	}
	require.NotNil(t, src)
	assert.Equal(t, report.StatusUnknown, src.Severity)
	assert.Equal(t, ReasonCentralStale, src.Reason)
	assert.Equal(t, "facts as last read at 2026-11-30T11:59:55Z, current until 2026-11-30T12:00:10Z", src.Message)

	// Stale central facts alone never read Healthy.
	out = Compute(snap(), late, defaultCfg)
	MergeCluster(out[report.ComponentLinstor], fresh, late, defaultCfg)
	assert.Equal(t, report.StatusUnknown, out[report.ComponentLinstor].Overall)
	assert.Equal(t, ReasonCentralStale, out[report.ComponentLinstor].Reason)
	assert.False(t, fresh.Fresh(late))
	assert.True(t, fresh.Fresh(t0))
	var nilFacts *ClusterFacts
	assert.False(t, nilFacts.Fresh(t0))

	// nil facts change nothing.
	a := Compute(s, t0, defaultCfg)
	b := Compute(s, t0, defaultCfg)
	MergeCluster(b[report.ComponentLinstor], nil, t0, defaultCfg)
	assert.Equal(t, a[report.ComponentLinstor], b[report.ComponentLinstor])
}

package soak

import (
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var labNodes = []string{"node-1", "node-2", "node-3"}

func sampleAt(at time.Time, health map[string]string, drain map[string]string) Sample {
	s := Sample{At: at, Health: map[string]string{}, Metric: map[string]string{}, Drain: map[string]string{}}
	for _, c := range Components {
		s.Health[c], s.Metric[c] = Healthy, Healthy
	}
	for _, n := range labNodes {
		s.Drain[n] = Safe
	}
	for c, v := range health {
		s.Health[c], s.Metric[c] = v, v
	}
	for n, v := range drain {
		s.Drain[n] = v
	}
	return s
}

// etcd-stop on node-2: Healthy inside the window is the old truth; past
// it, a false green; Degraded with node-1 and node-3 blocked is the truth.
func TestJudgeFalseGreenOnlyPastTheWindow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	truth := Catalog[0].Truth(labNodes, []string{"node-2"})
	p := newPhase(truth, Baseline, t0, 30*time.Second)

	j := p.record(sampleAt(t0.Add(5*time.Second), nil, nil))
	assert.Empty(t, j.greens, "Healthy inside the detection window is the previous truth")
	assert.False(t, j.atTruth)

	j = p.record(sampleAt(t0.Add(31*time.Second), nil, nil))
	assert.Len(t, j.greens, 4, "past the window: Health etcd, series etcd, and drain of node-1 and node-3 read green")
	assert.InDelta(t, 3, p.falseGreen, 0.01, "seconds since the previous sample, capped at 3")

	j = p.record(sampleAt(t0.Add(32*time.Second), map[string]string{"etcd": Degraded}, map[string]string{"node-1": Blocked, "node-3": Blocked}))
	assert.Empty(t, j.greens)
	assert.True(t, j.atTruth)
	assert.Equal(t, 32*time.Second, p.timeToTruth())
	assert.False(t, p.met(), "32 s is past the 30 s bound")
}

// After the repair, Down lingering inside the window is accepted when the
// fault's truth was Down; past it, a false red. Unknown is neither.
func TestJudgeFalseRedAndUnknown(t *testing.T) {
	t0 := time.Unix(1000, 0)
	quorum := Catalog[1].Truth(labNodes, []string{"node-1", "node-2"})
	p := newPhase(Baseline, quorum, t0, 60*time.Second)
	all := map[string]string{"node-1": Blocked, "node-2": Blocked, "node-3": Blocked}

	j := p.record(sampleAt(t0.Add(10*time.Second), map[string]string{"etcd": Down}, all))
	assert.Empty(t, j.reds, "inside the window the fault's truth is accepted")
	j = p.record(sampleAt(t0.Add(61*time.Second), map[string]string{"etcd": Down}, all))
	assert.Len(t, j.reds, 5, "etcd Down twice (object, series) and three blocked drains")
	j = p.record(sampleAt(t0.Add(62*time.Second), map[string]string{"etcd": Unknown}, nil))
	assert.Empty(t, j.reds)
	assert.Empty(t, j.greens)
	assert.False(t, j.atTruth, "Unknown while the truth is Healthy keeps the truth unread")
	assert.InDelta(t, 1+3+1, p.wrong, 0.01, "every sample off the truth: 1 s, 3 s (capped), 1 s")
}

// A failed read is neither green nor red and never the truth.
func TestJudgeNoAnswer(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := newPhase(Baseline, Baseline, t0, time.Second)
	j := p.record(sampleAt(t0.Add(5*time.Second), map[string]string{"disk": NoAnswer}, map[string]string{"node-1": NoAnswer}))
	assert.Empty(t, j.greens)
	assert.Empty(t, j.reds)
	assert.False(t, j.atTruth)
}

// The schedule is a function of the seed: the same seed draws the same
// steps; every eligible fault comes once before any repeats.
func TestScheduleDeterministicAndCovering(t *testing.T) {
	o := Options{RealOVSNode: "node-1"}
	a := Schedule(7, labNodes, len(Catalog)+3, o)
	b := Schedule(7, labNodes, len(Catalog)+3, o)
	require.Len(t, a, len(Catalog)+3)
	names := func(s []Step) []string {
		var out []string
		for _, x := range s {
			out = append(out, x.Name()+x.Dwell.String())
		}
		return out
	}
	assert.Equal(t, names(a), names(b))
	assert.False(t, reflect.DeepEqual(names(a), names(Schedule(8, labNodes, len(Catalog)+3, o))))
	seen := map[string]bool{}
	for _, s := range a[:len(Catalog)] {
		seen[s.Fault.Name] = true
	}
	assert.Len(t, seen, len(Catalog), "every fault before any repeats")
	for _, s := range a {
		if s.Fault.RealOVS {
			assert.Equal(t, []string{"node-1"}, s.Nodes, "%s acts on the node running the real OVS daemons", s.Fault.Name)
		}
	}
	for _, s := range Schedule(7, labNodes, 40, Options{}) {
		assert.False(t, s.Fault.RealOVS, "%s drawn in a lab without real OVS daemons", s.Fault.Name)
	}
	for _, s := range Schedule(7, labNodes, 20, Options{Short: true}) {
		assert.True(t, s.Fault.Short, s.Fault.Name)
	}
}

// No truth accepts Healthy for the component a fault acts on, nor safe
// for a node whose drain the fault makes unsafe: the catalog cannot hide
// a false green behind a permissive set.
func TestCatalogTruthsNeverAcceptGreenForTheFaultedComponent(t *testing.T) {
	for _, f := range Catalog {
		tr := f.Truth(labNodes, []string{"node-1", "node-2"})
		for c, s := range tr.Components {
			if f.Name == "talos-hang" && c == "node" {
				continue
			}
			assert.False(t, s.Has(Healthy), "%s: %s accepts Healthy", f.Name, c)
		}
		for c, nodes := range tr.Entries {
			for n, s := range nodes {
				assert.False(t, s.Has(Healthy), "%s: %s nodes[%s] accepts Healthy", f.Name, c, n)
			}
		}
	}
}

// A partitioned node's own entries must read Unknown: Healthy past the
// window is a false green, Down a false red, a missing entry neither; the
// other nodes' entries are not judged.
func TestJudgeNodeEntries(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var part *Fault
	for i := range Catalog {
		if Catalog[i].Name == "third-partitioned" {
			part = &Catalog[i]
		}
	}
	require.NotNil(t, part)
	p := newPhase(part.Truth(labNodes, []string{"node-2"}), Baseline, t0, 45*time.Second)
	unknownAll := map[string]string{}
	for _, c := range Components {
		unknownAll[c] = Unknown
	}
	// linstor is read from the LINSTOR controller, not from the agents: a
	// partitioned agent leaves it as it is.
	unknownAll["linstor"] = Healthy
	drains := map[string]string{"node-1": Undecide, "node-2": Undecide, "node-3": Undecide}
	judged := len(Components) - 1
	at := func(sec int, node2 string) Sample {
		s := sampleAt(t0.Add(time.Duration(sec)*time.Second), unknownAll, drains)
		s.Entries, s.Reasons = map[string]map[string]string{}, map[string]map[string]string{}
		for _, c := range Components {
			if c == "linstor" {
				s.Entries[c] = map[string]string{"node-1": Healthy, "node-2": Healthy, "node-3": Healthy}
				continue
			}
			s.Entries[c] = map[string]string{"node-1": Healthy, "node-3": Healthy}
			if node2 != "" {
				s.Entries[c]["node-2"] = node2
				// Only its uplink is cut: the kubelet renews its Lease.
				s.Reasons[c] = map[string]string{"node-2": ReasonAgentSilent}
			}
		}
		return s
	}
	j := p.record(at(5, Healthy))
	assert.Empty(t, j.greens, "inside the window the previous truth (Healthy) holds")
	j = p.record(at(50, Healthy))
	assert.Len(t, j.greens, judged, "past the window node-2's entry in every agent-fed component is a false green")
	j = p.record(at(51, Down))
	assert.Len(t, j.reds, judged, "Down for a node nothing is known about is a false red")
	j = p.record(at(52, ""))
	assert.Empty(t, j.greens)
	assert.Empty(t, j.reds)
	assert.False(t, j.atTruth, "a missing entry is not the truth")
	j = p.record(at(53, Unknown))
	assert.True(t, j.atTruth, "node-2 Unknown everywhere, node-1 and node-3 not judged: %v", j.off)
}

// A silent node's entries in the right state for the wrong reason keep
// the sample off the truth, neither green nor red; the right reason
// reaches it (issue 36).
func TestJudgeEntryReason(t *testing.T) {
	t0 := time.Unix(1000, 0)
	truth := maintenanceTruth(labNodes, []string{"node-2"}, nil)
	require.Equal(t, ReasonPlannedMaintenance, truth.Reasons["node-2"])
	p := newPhase(truth, Baseline, t0, 45*time.Second)
	silent := func(reason string) Sample {
		s := sampleAt(t0.Add(50*time.Second), map[string]string{"etcd": Degraded, "disk": Unknown, "cilium": Unknown, "kube-ovn": Unknown, "node": Unknown},
			map[string]string{"node-1": Blocked, "node-2": Undecide, "node-3": Blocked})
		s.Entries, s.Reasons = map[string]map[string]string{}, map[string]map[string]string{}
		for _, c := range Components {
			s.Entries[c] = map[string]string{"node-2": Unknown}
			s.Reasons[c] = map[string]string{"node-2": reason}
		}
		return s
	}
	j := p.record(silent(ReasonAgentSilent))
	assert.Empty(t, j.greens)
	assert.Empty(t, j.reds)
	assert.False(t, j.atTruth, "AgentSilent where the truth is PlannedMaintenance")
	assert.Contains(t, p.lastOff, `reason "AgentSilent" (truth PlannedMaintenance)`)

	j = p.record(silent(ReasonPlannedMaintenance))
	assert.True(t, j.atTruth)
}

// The silent faults name the reason their nodes' entries carry.
func TestSilentFaultReasons(t *testing.T) {
	want := map[string]string{"agent-stop": ReasonAgentSilent, "agent-kill": ReasonAgentSilent, "node-silent": ReasonAgentSilent,
		"third-partitioned": ReasonAgentSilent, "all-partitioned": ReasonManyNodesSilent, "node-down": ReasonNodeUnreachable}
	for _, f := range Catalog {
		if f.Class != ClassSilent {
			continue
		}
		r, ok := want[f.Name]
		require.True(t, ok, "silent fault %s names no reason here", f.Name)
		tr := f.Truth(labNodes, labNodes[:1])
		assert.Equal(t, r, tr.Reasons["node-1"], f.Name)
		delete(want, f.Name)
	}
	assert.Empty(t, want, "faults missing from the catalog")
}

// The gate's answers are scored as the drain verdicts: let through while
// the truth has no safe drain is a false green, refused as blocked while
// the drain is safe a false red; they do not hold the time to truth.
func TestJudgeGate(t *testing.T) {
	t0 := time.Unix(1000, 0)
	truth := Catalog[0].Truth(labNodes, []string{"node-2"}) // etcd-stop on node-2
	p := newPhase(truth, Baseline, t0, 30*time.Second)
	at := func(sec int, gate map[string]string) judgement {
		s := sampleAt(t0.Add(time.Duration(sec)*time.Second), map[string]string{"etcd": Degraded}, map[string]string{"node-1": Blocked, "node-3": Blocked})
		s.Gate = map[string]string{"node-1": Blocked, "node-2": Safe, "node-3": Blocked}
		for n, v := range gate {
			s.Gate[n] = v
		}
		return p.record(s)
	}
	j := at(31, map[string]string{"node-1": Safe})
	require.Len(t, j.greens, 1)
	assert.Equal(t, "gate node-1 read safe, truth blocked", j.greens[0])
	assert.True(t, j.atTruth, "the gate does not hold the time to truth")
	j = at(32, map[string]string{"node-1": Undecide, "node-3": NoAnswer})
	assert.Empty(t, j.greens, "unknown and no answer are neither")
	assert.Empty(t, j.reds)

	p = newPhase(Baseline, truth, t0, 30*time.Second)
	j = p.record(func() Sample {
		s := sampleAt(t0.Add(31*time.Second), nil, nil)
		s.Gate = map[string]string{"node-1": Blocked, "node-2": Safe, "node-3": Safe}
		return s
	}())
	require.Len(t, j.reds, 1)
	assert.Equal(t, "gate node-1 read blocked, truth safe", j.reds[0])
}

// gateAnswer reads the guard's answer as the apiserver returns it.
func TestGateAnswer(t *testing.T) {
	tooMany := func(msg string) error {
		return apierrors.NewTooManyRequests(`admission webhook "a.drain-guard.health.cozystack.io" denied the request: `+msg, 0)
	}
	assert.Equal(t, Safe, gateAnswer(nil, nil))
	assert.Equal(t, Undecide, gateAnswer(nil, []string{"cozy-health: draining node-1 (reboot) is unknown (etcd-quorum: stale), allowed: cordoned more than 5m0s ago"}))
	assert.Equal(t, Blocked, gateAnswer(tooMany("cozy-health: draining node-1 (reboot) is blocked: etcd-quorum: ..."), nil))
	assert.Equal(t, Undecide, gateAnswer(tooMany("cozy-health: draining node-1 (reboot) is unknown: etcd-quorum: ...; refused until ..."), nil))
	assert.Equal(t, Undecide, gateAnswer(tooMany("cozy-health: this aggregator replica is still warming up; retry"), nil))
	assert.Equal(t, NoAnswer, gateAnswer(apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "web-node-1"), nil))
}

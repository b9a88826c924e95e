package rollup

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cozystack/cozy-health/aggregator/internal/status"
	"github.com/cozystack/cozy-health/pkg/report"
)

var holds = Holds{Degraded: 10 * time.Second}

func TestStepRule(t *testing.T) {
	type step struct {
		at      time.Duration
		desired report.Status
		want    report.Status // published after the step
	}
	for _, tc := range []struct {
		name  string
		holds Holds
		steps []step
	}{
		{"first sight is published at once", holds, []step{{0, G, G}}},
		{"degraded must persist for its hold", holds, []step{{0, H, H}, {1 * time.Second, G, H}, {10 * time.Second, G, H}, {11 * time.Second, G, G}}},
		{"a blip to degraded is never published", holds, []step{{0, H, H}, {1 * time.Second, G, H}, {5 * time.Second, H, H}, {8 * time.Second, G, H}, {17 * time.Second, G, H}, {18 * time.Second, G, G}}},
		{"down and unknown are published at once by default", holds, []step{{0, H, H}, {time.Second, U, U}, {2 * time.Second, D, D}}},
		{"recovery is published at once", holds, []step{{0, D, D}, {time.Second, H, H}}},
		{"partial recovery is published at once", holds, []step{{0, D, D}, {time.Second, G, G}}},
		{"worsening held then jumping to down publishes down", holds, []step{{0, H, H}, {time.Second, G, H}, {2 * time.Second, D, D}}},
		{"worsening clock counts from the first worse rollup", Holds{Degraded: 10 * time.Second, Unknown: 4 * time.Second}, []step{{0, H, H}, {time.Second, U, H}, {3 * time.Second, G, H}, {5 * time.Second, U, U}}},
		{"configured down hold", Holds{Down: 3 * time.Second}, []step{{0, G, G}, {time.Second, D, G}, {4 * time.Second, D, D}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tr Track
			seen := false
			for i, s := range tc.steps {
				tr, _ = Step(tr, seen, s.desired, t0.Add(s.at), tc.holds)
				seen = true
				assert.Equal(t, s.want, tr.Published, "step %d (t+%s desired %s)", i, s.at, s.desired)
			}
		})
	}
}

func TestDamperHoldsWholeFacts(t *testing.T) {
	d := NewDamper(holds)
	mk := func(s report.Status, reason string) *status.Component {
		return &status.Component{
			Component: report.ComponentDisk, Overall: s, Reason: reason,
			Nodes:      map[string]status.NodeState{"a": {Status: s, Reason: reason}},
			Conditions: []status.Condition{{Type: "FsyncProbe", Node: "a", Severity: s, Reason: reason}},
		}
	}
	cs := mk(H, "Fine")
	d.Apply(cs, t0)
	cs = mk(G, "Slow")
	d.Apply(cs, t0.Add(2*time.Second))
	assert.Equal(t, H, cs.Overall)
	assert.Equal(t, "Fine", cs.Nodes["a"].Reason, "the held node state keeps its previous reason")
	assert.Equal(t, "Fine", cs.Conditions[0].Reason)
	assert.Equal(t, t0, cs.Conditions[0].LastTransition)

	cs = mk(G, "Slow")
	d.Apply(cs, t0.Add(12*time.Second))
	assert.Equal(t, G, cs.Overall)
	assert.Equal(t, "Slow", cs.Nodes["a"].Reason)
	assert.Equal(t, t0.Add(12*time.Second), cs.Conditions[0].LastTransition)

	cs = mk(H, "Fine")
	d.Apply(cs, t0.Add(13*time.Second))
	assert.Equal(t, H, cs.Overall, "recovery at once")
	assert.Equal(t, t0.Add(13*time.Second), cs.Conditions[0].LastTransition)

	// A node that disappears is forgotten: when it comes back it is new.
	cs = mk(H, "Fine")
	delete(cs.Nodes, "a")
	cs.Conditions = nil
	d.Apply(cs, t0.Add(14*time.Second))
	cs = mk(G, "Slow")
	d.Apply(cs, t0.Add(15*time.Second))
	assert.Equal(t, G, cs.Nodes["a"].Status)
}

func TestStampSummaries(t *testing.T) {
	d := NewDamper(holds)
	mk := func(s report.Status) *status.Component {
		return &status.Component{Component: report.ComponentDisk, Conditions: []status.Condition{{Type: "FsyncProbe", Severity: s}}}
	}
	cs := mk(H)
	d.Stamp(cs, t0)
	assert.Equal(t, t0, cs.Conditions[0].LastTransition)
	cs = mk(H)
	d.Stamp(cs, t0.Add(time.Second))
	assert.Equal(t, t0, cs.Conditions[0].LastTransition, "unchanged status keeps its transition time")
	cs = mk(G)
	d.Stamp(cs, t0.Add(2*time.Second))
	assert.Equal(t, t0.Add(2*time.Second), cs.Conditions[0].LastTransition)
}

// A replica seeded with what the Health object says keeps its
// lastTransitionTime for a condition it publishes for the first time, or
// that its filling view moves back to the seeded status, when status and
// reason are the same; anything else, and anything after the seed window,
// dates from now.
func TestDamperSeedKeepsLastTransition(t *testing.T) {
	since := t0.Add(-72 * time.Hour)
	d := NewDamper(Holds{})
	d.Seed(report.ComponentEtcd, map[SeedKey]Seed{
		{Type: "FsyncLatency", Kind: report.KindNode, Name: "a"}: {Status: metav1.ConditionFalse, Reason: "LatencyHigh", LastTransition: since},
		{Type: "FsyncLatency", Kind: report.KindNode, Name: "b"}: {Status: metav1.ConditionFalse, Reason: "LatencyHigh", LastTransition: since},
		{Type: "Quorum"}:  {Status: metav1.ConditionTrue, Reason: ReasonQuorumHealthy, LastTransition: since},
		{Type: "Summary"}: {Status: metav1.ConditionFalse, Reason: "SomeNodesNotTrue", LastTransition: since},
		{Type: "DRBDResource", Kind: report.KindResource, Name: "pvc-1"}: {Status: metav1.ConditionFalse, Reason: "Outdated", LastTransition: since},
	}, t0.Add(30*time.Second))
	mk := func(quorum report.Status, quorumReason string) *status.Component {
		return &status.Component{Component: report.ComponentEtcd, Overall: G, Conditions: []status.Condition{
			{Type: "FsyncLatency", Node: "a", Severity: G, Reason: "LatencyHigh"},
			{Type: "FsyncLatency", Node: "b", Severity: G, Reason: "LatencyVeryHigh"},
			{Type: "Quorum", Severity: quorum, Reason: quorumReason},
			{Type: "DRBDResource", Node: "a", Resource: &report.ResourceRef{Kind: report.KindResource, Name: "pvc-1"}, Severity: D, Reason: "Outdated"},
			{Type: "Summary", Severity: G, Reason: "SomeNodesNotTrue"},
		}}
	}
	at := func(cs *status.Component, typ, node string) time.Time {
		for _, c := range cs.Conditions {
			if c.Type == typ && c.Node == node {
				return c.LastTransition
			}
		}
		t.Fatalf("no condition %s/%s", typ, node)
		return time.Time{}
	}
	// The first rollup sees only part of the cluster: quorum at risk.
	now := t0
	cs := mk(G, ReasonQuorumAtRisk)
	d.Apply(cs, now)
	cs.Conditions[4].LastTransition = time.Time{}
	d.Stamp(cs, now)
	assert.Equal(t, since, at(cs, "FsyncLatency", "a"), "same status and reason: the object's time")
	assert.Equal(t, now, at(cs, "FsyncLatency", "b"), "another reason: a transition now")
	assert.Equal(t, now, at(cs, "Quorum", ""), "another status: a transition now")
	assert.Equal(t, since, at(cs, "DRBDResource", "a"), "resource conditions match on their resource; Degraded and Down are both False")
	assert.Equal(t, since, at(cs, "Summary", ""), "summaries stamped from the seed too")

	// All reports in: quorum healthy again, as the object said.
	now = t0.Add(10 * time.Second)
	cs = mk(H, ReasonQuorumHealthy)
	d.Apply(cs, now)
	assert.Equal(t, since, at(cs, "Quorum", ""), "back to the seeded status within the window")
	assert.Equal(t, since, at(cs, "FsyncLatency", "a"), "no transition, the time stays")

	// After the window, a transition is a transition.
	now = t0.Add(time.Minute)
	d.Apply(mk(G, ReasonQuorumAtRisk), now)
	cs = mk(H, ReasonQuorumHealthy)
	now = now.Add(time.Second)
	d.Apply(cs, now)
	assert.Equal(t, now, at(cs, "Quorum", ""))
}

// TestDamperOverallNeverBetterThanPublishedNodes: a held worsening of the
// overall never leaves the object greener than the node states published
// beside it; a worsening whose facts are all held stays held.
func TestDamperOverallNeverBetterThanPublishedNodes(t *testing.T) {
	mk := func(comp string, overall report.Status, reason string, nodes map[string]report.Status) *status.Component {
		cs := &status.Component{Component: comp, Overall: overall, Reason: reason, Nodes: map[string]status.NodeState{}}
		for n, s := range nodes {
			cs.Nodes[n] = status.NodeState{Status: s}
		}
		return cs
	}
	type step struct {
		at          time.Duration
		in          *status.Component
		want        report.Status
		wantReason  string
		description string
	}
	for _, tc := range []struct {
		name  string
		holds Holds
		steps []step
	}{
		{"a silent etcd member: Unknown at once, Degraded after the hold", Holds{Degraded: 10 * time.Second}, []step{
			{0, mk(report.ComponentEtcd, H, ReasonQuorumHealthy, map[string]report.Status{"a": H, "b": H, "c": H}), H, ReasonQuorumHealthy, "all healthy"},
			{time.Second, mk(report.ComponentEtcd, G, ReasonQuorumAtRisk, map[string]report.Status{"a": H, "b": H, "c": U}), U, ReasonNodesNotHealthy, "c's Unknown entry is published, so the overall is not Healthy"},
			{11 * time.Second, mk(report.ComponentEtcd, G, ReasonQuorumAtRisk, map[string]report.Status{"a": H, "b": H, "c": U}), G, ReasonQuorumAtRisk, "the hold ran out"},
			{12 * time.Second, mk(report.ComponentEtcd, H, ReasonQuorumHealthy, map[string]report.Status{"a": H, "b": H, "c": H}), H, ReasonQuorumHealthy, "recovery at once"},
		}},
		{"one node Down in a node-local component judged Degraded", Holds{Degraded: 10 * time.Second}, []step{
			{0, mk(report.ComponentCilium, H, ReasonNodesHealthy, map[string]report.Status{"a": H, "b": H}), H, ReasonNodesHealthy, "all healthy"},
			{time.Second, mk(report.ComponentCilium, G, ReasonNodesNotHealthy, map[string]report.Status{"a": D, "b": H}), G, ReasonNodesNotHealthy, "a's Down entry is published (no Down hold): Degraded at once, never Down"},
		}},
		{"a Degraded node held: the overall is held too", Holds{Degraded: 10 * time.Second}, []step{
			{0, mk(report.ComponentDisk, H, ReasonNodesHealthy, map[string]report.Status{"a": H, "b": H}), H, ReasonNodesHealthy, "all healthy"},
			{time.Second, mk(report.ComponentDisk, G, ReasonNodesNotHealthy, map[string]report.Status{"a": G, "b": H}), H, ReasonNodesHealthy, "a's Degraded entry is held, and so is the overall"},
			{11 * time.Second, mk(report.ComponentDisk, G, ReasonNodesNotHealthy, map[string]report.Status{"a": G, "b": H}), G, ReasonNodesNotHealthy, "both published together"},
		}},
		{"an Unknown hold holds the overall with the entry", Holds{Degraded: 10 * time.Second, Unknown: 3 * time.Second}, []step{
			{0, mk(report.ComponentEtcd, H, ReasonQuorumHealthy, map[string]report.Status{"a": H, "b": H, "c": H}), H, ReasonQuorumHealthy, "all healthy"},
			{time.Second, mk(report.ComponentEtcd, G, ReasonQuorumAtRisk, map[string]report.Status{"a": H, "b": H, "c": U}), H, ReasonQuorumHealthy, "c's entry held"},
			{4 * time.Second, mk(report.ComponentEtcd, G, ReasonQuorumAtRisk, map[string]report.Status{"a": H, "b": H, "c": U}), U, ReasonNodesNotHealthy, "c's entry published: Unknown"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := NewDamper(tc.holds)
			for i, s := range tc.steps {
				d.Apply(s.in, t0.Add(s.at))
				assert.Equal(t, s.want, s.in.Overall, "step %d: %s", i, s.description)
				assert.Equal(t, s.wantReason, s.in.Reason, "step %d: %s", i, s.description)
			}
		})
	}
}

// TestDamperConditionNeverGreenerThanPublishedNodes: a held condition is
// published at once when the node states published beside it already read
// worse than what it would keep; one whose facts are all held stays held.
func TestDamperConditionNeverGreenerThanPublishedNodes(t *testing.T) {
	h := Holds{Degraded: 10 * time.Second}
	quorum := func(s report.Status, reason string) status.Condition {
		return status.Condition{Type: "Quorum", Severity: s, Reason: reason}
	}
	etcd := func(c report.Status, q status.Condition) *status.Component {
		return &status.Component{Component: report.ComponentEtcd, Overall: q.Severity, Reason: q.Reason,
			Nodes:      map[string]status.NodeState{"a": {Status: H}, "b": {Status: H}, "c": {Status: c}},
			Conditions: []status.Condition{q, {Type: "EtcdMember", Node: "a", Severity: H, Reason: "MemberHealthy"}}}
	}
	d := NewDamper(h)
	cs := etcd(H, quorum(H, ReasonQuorumHealthy))
	d.Apply(cs, t0)
	require.Equal(t, ReasonQuorumHealthy, cs.Conditions[0].Reason)

	// c goes silent: its entry reads Unknown at once (no Unknown hold), so
	// the Quorum condition may not keep saying all members are healthy.
	cs = etcd(U, quorum(G, ReasonQuorumAtRisk))
	d.Apply(cs, t0.Add(time.Second))
	assert.Equal(t, U, cs.Overall)
	assert.Equal(t, ReasonQuorumAtRisk, cs.Conditions[0].Reason, "released: c's Unknown entry is published beside it")
	assert.Equal(t, t0.Add(time.Second), cs.Conditions[0].LastTransition)
	assert.Equal(t, "MemberHealthy", cs.Conditions[1].Reason)
	assert.True(t, d.Holding(), "the overall's worsening to Degraded is still held")

	// A node-pinned condition follows its own node: a's FsyncProbe turning
	// Degraded with a's entry held stays held; b's entry published Down
	// releases b's condition.
	disk := func(a, b report.Status, ca, cb status.Condition) *status.Component {
		ca.Node, cb.Node, ca.Type, cb.Type = "a", "b", "FsyncProbe", "FsyncProbe"
		return &status.Component{Component: report.ComponentDisk, Overall: report.Worse(a, b), Reason: ReasonNodesNotHealthy,
			Nodes: map[string]status.NodeState{"a": {Status: a}, "b": {Status: b}}, Conditions: []status.Condition{ca, cb}}
	}
	fine := status.Condition{Severity: H, Reason: "FsyncFast"}
	d = NewDamper(h)
	d.Apply(disk(H, H, fine, fine), t0)
	cs = disk(G, D, status.Condition{Severity: G, Reason: "FsyncSlow"}, status.Condition{Severity: G, Reason: "FsyncSlow"})
	d.Apply(cs, t0.Add(time.Second))
	assert.Equal(t, H, cs.Nodes["a"].Status, "a's Degraded entry is held")
	assert.Equal(t, "FsyncFast", cs.Conditions[0].Reason, "and so is a's condition")
	assert.Equal(t, D, cs.Nodes["b"].Status, "b's Down entry is published at once")
	assert.Equal(t, "FsyncSlow", cs.Conditions[1].Reason, "b's condition is released")
	assert.True(t, d.Holding())
}

package state

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/pkg/report"
)

type recorder struct{ accepted, removed []string }

func (r *recorder) Accepted(node string, _ time.Time) { r.accepted = append(r.accepted, node) }
func (r *recorder) Removed(node string)               { r.removed = append(r.removed, node) }

func rep(node, instance string, seq uint64) *report.NodeReport {
	return &report.NodeReport{NodeName: node, AgentInstanceID: instance, Sequence: seq, Interval: 5 * time.Second}
}

// A node Kubernetes lists is in the state without a report until one is
// accepted; Expect never overwrites a report, and a pruned node stays
// pruned until Kubernetes creates it again.
func TestExpectedNodes(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	obs := &recorder{}
	s := New(obs)

	s.Expect("a", t0)
	e, ok := s.Get("a")
	require.True(t, ok)
	assert.Nil(t, e.Report)
	assert.Equal(t, t0, e.ReceivedAt)
	assert.Empty(t, e.Observations())
	assert.Zero(t, e.Interval())

	s.Expect("a", t0.Add(time.Minute))
	e, _ = s.Get("a")
	assert.Equal(t, t0, e.ReceivedAt, "a second Expect does not move the time it was learned of")

	r := rep("a", "i1", 1)
	s.Accept(r, t0.Add(time.Second))
	e, _ = s.Get("a")
	assert.Same(t, r, e.Report)
	s.Expect("a", t0.Add(2*time.Second))
	e, _ = s.Get("a")
	assert.Same(t, r, e.Report, "Expect leaves a reporting node alone")
	s.Unexpect("a")
	_, ok = s.Get("a")
	assert.True(t, ok, "a reporting node stays when its labels leave the selector")

	s.Expect("b", t0)
	s.Unexpect("b")
	_, ok = s.Get("b")
	assert.False(t, ok)
	assert.Equal(t, []string{"b"}, obs.removed)

	s.DeleteNode("a")
	s.Expect("a", t0)
	_, ok = s.Get("a")
	assert.False(t, ok, "a pruned node is not expected again before Restore")
	s.Restore("a")
	s.Expect("a", t0.Add(time.Hour))
	e, ok = s.Get("a")
	require.True(t, ok)
	assert.Nil(t, e.Report)
	assert.Equal(t, []string{"a"}, obs.accepted)
}

// TestSetRole: a Node's role reaches its entry whether the Node or the
// report comes first, survives new reports, and goes with the Node.
func TestSetRole(t *testing.T) {
	s := New(nil)
	now := time.Now()
	s.SetRole("cp-1", RoleControlPlane)
	s.Accept(&report.NodeReport{NodeName: "cp-1", AgentInstanceID: "a", Sequence: 1}, now)
	e, _ := s.Get("cp-1")
	assert.Equal(t, RoleControlPlane, e.Role, "role set before the first report")

	s.Accept(&report.NodeReport{NodeName: "w-1", AgentInstanceID: "a", Sequence: 1}, now)
	e, _ = s.Get("w-1")
	assert.Equal(t, RoleUnknown, e.Role, "no Node seen yet")
	s.SetRole("w-1", RoleWorker)
	e, _ = s.Get("w-1")
	assert.Equal(t, RoleWorker, e.Role, "role set after the first report")
	s.Accept(&report.NodeReport{NodeName: "w-1", AgentInstanceID: "a", Sequence: 2}, now)
	e, _ = s.Get("w-1")
	assert.Equal(t, RoleWorker, e.Role, "kept across reports")

	s.DeleteNode("w-1")
	s.Restore("w-1")
	s.Expect("w-1", now)
	e, _ = s.Get("w-1")
	assert.Equal(t, RoleUnknown, e.Role, "a deleted Node's role goes with it")

	assert.Equal(t, RoleControlPlane, RoleOf(map[string]string{LabelControlPlane: ""}))
	assert.Equal(t, RoleWorker, RoleOf(map[string]string{"kube-ovn/role": "master"}), "a label a kubelet may set on itself is no role")
}

// A Tracker names every node whose entry changed since its last drain, by
// every kind of change, and nothing that left an entry as it was.
func TestTrackerNamesEveryChange(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	s := New(nil)
	s.Accept(rep("before", "i", 1), t0)
	tr := s.Track()
	drain := func() []string {
		var names []string
		s.ReadChanged(tr, func(nodes map[string]Entry, changed map[string]struct{}) {
			for n := range changed {
				names = append(names, n)
			}
		})
		return names
	}
	assert.Empty(t, drain(), "changes before Track are not tracked")

	s.Accept(rep("a", "i", 1), t0)
	s.Accept(rep("a", "i", 2), t0)
	s.Expect("b", t0)
	assert.ElementsMatch(t, []string{"a", "b"}, drain())
	assert.Empty(t, drain(), "a drain empties the tracker")

	s.Accept(rep("a", "i", 2), t0) // a replay: nothing stored
	s.Expect("a", t0)              // a reports: left alone
	s.SetRole("b", RoleUnknown)    // the role it has
	s.Unexpect("a")                // a reports: stays
	assert.Empty(t, drain(), "calls that change no entry")

	s.SetRole("a", RoleWorker)
	s.Unexpect("b")
	s.DeleteNode("before")
	s.DeleteNode("never-there")
	assert.ElementsMatch(t, []string{"a", "b", "before"}, drain())

	s.ReadChanged(tr, func(nodes map[string]Entry, _ map[string]struct{}) {
		assert.Len(t, nodes, 1, "only a is left")
	})
}

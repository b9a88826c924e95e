package writer

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/aggregator/internal/rollup"
	"github.com/cozystack/cozy-health/aggregator/internal/state"
	"github.com/cozystack/cozy-health/aggregator/internal/status"
	"github.com/cozystack/cozy-health/pkg/report"
)

// badReports are reports that ingest refuses (report.CheckBounds) but that
// reach the writer here through the state directly: the writer's own
// defence. n1 has a DRBD resource with an empty name and a reason of 2,000
// bytes, n2 9,000 distinct check names.
func badReports(now time.Time) state.Snapshot {
	n1 := &report.NodeReport{NodeName: "n1", AgentInstanceID: "i", Sequence: 1, SentAt: now, Interval: 5 * time.Second, Observations: []report.Observation{
		{Component: report.ComponentLinstor, Check: report.CheckDRBDResource, Status: report.StatusDown, Reason: "DiskFailed",
			ResourceRef: &report.ResourceRef{Kind: report.KindResource}},
		{Component: report.ComponentLinstor, Check: report.CheckDRBDResource, Status: report.StatusDegraded, Reason: strings.Repeat("R", 2000),
			Message: strings.Repeat("m", 40000), ResourceRef: &report.ResourceRef{Kind: report.KindResource, Name: "pvc-2"}},
		{Component: report.ComponentLinstor, Check: report.CheckDRBDResource, Status: report.StatusHealthy, Reason: "DiskUpToDate",
			ResourceRef: &report.ResourceRef{Kind: report.KindResource, Name: "pvc-3"}},
	}}
	n2 := &report.NodeReport{NodeName: "n2", AgentInstanceID: "i", Sequence: 1, SentAt: now, Interval: 5 * time.Second}
	for i := range 9000 {
		n2.Observations = append(n2.Observations, report.Observation{Component: report.ComponentDisk, Check: "check-" + strings.Repeat("x", i%3) + itoa(i),
			Status: report.StatusDegraded, Reason: "Slow", ResourceRef: &report.ResourceRef{Kind: report.KindNode, Name: "n2"}})
	}
	return state.Snapshot{"n1": {Report: n1, ReceivedAt: now}, "n2": {Report: n2, ReceivedAt: now}}
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

// compute is the engine's path: rollup, the damper's transition times
// (every condition new at now), then Compact.
func compute(snap state.Snapshot, now time.Time) map[string]*status.Component {
	out := rollup.Compute(snap, now, rollup.Config{DefaultInterval: 5 * time.Second, FreshForMultiple: 6})
	for _, cs := range out {
		for i := range cs.Conditions {
			cs.Conditions[i].LastTransition = now
		}
		rollup.Compact(cs, rollup.DefaultMaxListed)
		for i := range cs.Conditions {
			cs.Conditions[i].LastTransition = now
		}
	}
	return out
}

// TestBoundConditions: the writer drops a condition it cannot write (an
// empty resourceRef name), truncates a long reason and message, and drops
// the healthiest conditions past the CRD's maxItems and the size budget;
// the rest stays, and Issues counts what is written.
func TestBoundConditions(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	got := compute(badReports(now), now)

	linstor, counts := boundConditions(got[report.ComponentLinstor])
	assert.Equal(t, map[string]int{BoundResourceRef: 1, BoundReason: 1}, counts, "the 40,000-byte message was already cut by the rollup")
	for _, c := range linstor.Conditions {
		assert.LessOrEqual(t, len(c.Reason), report.MaxReason)
		if c.Resource != nil {
			assert.NotEmpty(t, c.Resource.Name)
		}
	}
	assert.Equal(t, report.StatusDown, linstor.Overall, "the judgement stands: only the condition is dropped")

	disk := got[report.ComponentDisk]
	require.Greater(t, len(disk.Conditions), report.MaxConditions, "9,000 check names give more conditions than the schema allows")
	bounded, counts := boundConditions(disk)
	assert.LessOrEqual(t, len(bounded.Conditions), report.MaxConditions)
	assert.LessOrEqual(t, conditionsSize(bounded.Conditions), MaxConditionBytes)
	assert.Positive(t, counts[BoundMaxItems]+counts[BoundSize])
	issues := 0
	for _, c := range bounded.Conditions {
		if c.ConditionStatus() == "False" {
			issues++
		}
	}
	assert.Equal(t, issues, bounded.Issues)
	assert.Equal(t, 9000+rollup.DefaultMaxListed, len(disk.Conditions), "the input is not modified")

	// A condition within bounds is written as it is.
	ok := &status.Component{Component: "disk", Conditions: []status.Condition{{Type: "FsyncProbe", Severity: report.StatusDegraded, Reason: "Slow", Node: "n1"}}}
	same, counts := boundConditions(ok)
	assert.Same(t, ok, same)
	assert.Nil(t, counts)
	// A type the pattern refuses is dropped.
	_, counts = boundConditions(&status.Component{Conditions: []status.Condition{{Type: "not-camel"}, {Type: strings.Repeat("A", 317)}, {Type: ""}}})
	assert.Equal(t, map[string]int{BoundType: 3}, counts)
}

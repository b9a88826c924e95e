package writer

import (
	"encoding/json"
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

// TestBoundStatusKeepsEveryNodeUnderTheBudget: 10,000 nodes that all
// missed their heartbeat (about 190 bytes an entry) or are all Degraded
// with a full message would make a status etcd refuses (1.5 MiB). Bounded,
// the encoded status is under MaxStatusBytes, every node keeps its entry
// with its status and reason, messages are kept first by the worst nodes,
// and what was left out is counted.
func TestBoundStatusKeepsEveryNodeUnderTheBudget(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	for _, scenario := range []string{"silent", "degraded"} {
		t.Run(scenario, func(t *testing.T) {
			snap := nodeSnapshot(10000, scenario, now)
			// One node Down: it keeps its message before the others.
			down := snap["node-09999"]
			r := *down.Report
			r.Observations = []report.Observation{{Component: report.ComponentDisk, Check: report.CheckFsyncProbe, Status: report.StatusDown, Reason: "ProbeFailed", Message: "write failed"}}
			snap["node-09999"] = state.Entry{Report: &r, ReceivedAt: now, Role: state.RoleWorker}
			cs := compute(snap, now)[report.ComponentDisk]
			whole, err := json.Marshal(statusApply("cozy-system", cs))
			require.NoError(t, err)
			require.Greater(t, len(whole), 3<<19, "unbounded, the status is over etcd's 1.5 MiB")

			bounded, counts := boundStatus(cs)
			body, err := json.Marshal(statusApply("cozy-system", bounded))
			require.NoError(t, err)
			assert.LessOrEqual(t, len(body), MaxStatusBytes+512, "the encoded object (its name and kind beside the status)")
			require.Len(t, bounded.Nodes, 10000, "every node keeps its entry")
			for name, ns := range cs.Nodes {
				got := bounded.Nodes[name]
				assert.Equal(t, ns.Status, got.Status, name)
				assert.Equal(t, ns.Reason, got.Reason, name)
			}
			assert.Equal(t, "FsyncProbe: write failed", bounded.Nodes["node-09999"].Message, "the Down node keeps its message")
			assert.NotEmpty(t, bounded.Nodes["node-00000"].Message, "the first by name keep theirs")
			assert.Empty(t, bounded.Nodes["node-09998"].Message, "the last by name lose theirs")
			assert.Positive(t, counts[BoundNodeMessage])
			assert.Zero(t, counts[BoundNodeOverLimit])
			assert.Equal(t, cs.Overall, bounded.Overall, "the judgement stands")
			assert.NotEmpty(t, cs.Nodes["node-09998"].Message, "the input is not modified")
		})
	}

	// Within the budget, nothing is touched.
	cs := compute(nodeSnapshot(10000, "healthy", now), now)[report.ComponentDisk]
	same, counts := boundStatus(cs)
	assert.Same(t, cs, same)
	assert.Nil(t, counts)
}

// TestJSONStringSize holds the size estimate to encoding/json.
func TestJSONStringSize(t *testing.T) {
	for _, s := range []string{"", "node-1", `a "quoted" \ path`, "<tag> & more", "tab\tnew\nline\x01", "日本語", "bad \xff utf8", "sep \u2028 \u2029"} {
		b, err := json.Marshal(s)
		require.NoError(t, err)
		assert.Equal(t, len(b), jsonStringSize(s), "%q", s)
	}
}

// TestBoundStatusPastTheContract: 20,000 silent nodes fit only with
// degradedNodes cut (the printer column names the first ones, then "+N
// more"); at 25,000 even their status and reason leave the conditions
// less than their floor, which is counted as over_limit, every node still
// listed.
func TestBoundStatusPastTheContract(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	cs := compute(nodeSnapshot(20000, "silent", now), now)[report.ComponentDisk]
	bounded, counts := boundStatus(cs)
	assert.Equal(t, 1, counts[BoundNodeDegradedNodes])
	assert.Zero(t, counts[BoundNodeOverLimit])
	last := bounded.DegradedNodes[len(bounded.DegradedNodes)-1]
	assert.Regexp(t, `^\+[0-9]+ more$`, last)
	assert.Equal(t, "node-00000", bounded.DegradedNodes[0])
	body, err := json.Marshal(statusApply("cozy-system", bounded))
	require.NoError(t, err)
	assert.LessOrEqual(t, len(body), MaxStatusBytes+512)
	assert.Len(t, bounded.Nodes, 20000)

	cs = compute(nodeSnapshot(25000, "silent", now), now)[report.ComponentDisk]
	bounded, counts = boundStatus(cs)
	assert.Equal(t, 1, counts[BoundNodeOverLimit])
	assert.Len(t, bounded.Nodes, 25000)
}

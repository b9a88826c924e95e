package writer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/aggregator/internal/status"
	healthv1alpha1 "github.com/cozystack/cozy-health/pkg/apis/health/v1alpha1"
	"github.com/cozystack/cozy-health/pkg/report"
)

func TestStatusApply(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	cs := &status.Component{
		Component: report.ComponentDisk, Overall: report.StatusDegraded, ObservedAt: at, FreshUntil: at.Add(30 * time.Second),
		Nodes: map[string]status.NodeState{
			"a": {Status: report.StatusHealthy},
			"c": {Status: report.StatusDegraded, Reason: "ProbeSlow"},
			"b": {Status: report.StatusUnknown, Reason: report.ReasonHeartbeatMissed, Message: "silent", LastReportAt: at.Add(-20 * time.Second)},
		},
		Conditions: []status.Condition{
			{Type: "FsyncProbe", Severity: report.StatusDegraded, Reason: "SomeNodesFalse", LastTransition: at},
			{Type: "Heartbeat", Severity: report.StatusUnknown, Reason: report.ReasonHeartbeatMissed, Node: "b", LastTransition: at},
		},
		DegradedNodes: []string{"b"}, Issues: 1,
	}
	ac := statusApply("cozy-system", cs)
	require.NotNil(t, ac.Status)
	st := ac.Status
	assert.Equal(t, healthv1alpha1.StatusDegraded, *st.Overall)
	assert.Equal(t, "b", *st.DegradedNodes)
	assert.Equal(t, int32(1), *st.Issues)
	assert.Nil(t, st.Nodes["a"].LastReportAt, "a fresh node carries no lastReportAt")
	assert.Nil(t, st.Nodes["c"].LastReportAt, "a fresh node carries no lastReportAt")
	require.NotNil(t, st.Nodes["b"].LastReportAt)
	assert.Equal(t, at.Add(-20*time.Second), st.Nodes["b"].LastReportAt.Time)
	assert.Equal(t, healthv1alpha1.ConditionFalse, *st.Conditions[0].Status)
	assert.Nil(t, st.Conditions[0].ResourceRef, "a summary is not pinned")
	assert.Equal(t, healthv1alpha1.ConditionUnknown, *st.Conditions[1].Status)
	require.NotNil(t, st.Conditions[1].ResourceRef)
	assert.Equal(t, "Node", *st.Conditions[1].ResourceRef.Kind)
	assert.Equal(t, "b", *st.Conditions[1].ResourceRef.Name)
}

func TestFingerprintIgnoresTimesOnly(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	mk := func(now time.Time, s report.Status) *status.Component {
		return &status.Component{Component: "disk", Overall: s, ObservedAt: now, FreshUntil: now.Add(time.Minute),
			Nodes: map[string]status.NodeState{"a": {Status: s, LastReportAt: now}}}
	}
	assert.Equal(t, Fingerprint(mk(at, report.StatusHealthy)), Fingerprint(mk(at.Add(5*time.Second), report.StatusHealthy)))
	assert.NotEqual(t, Fingerprint(mk(at, report.StatusHealthy)), Fingerprint(mk(at, report.StatusDegraded)))
}

func TestRefreshPeriodsAreStaggered(t *testing.T) {
	w := &Writer{cfg: Config{RefreshPeriod: 10 * time.Second}}
	seen := map[time.Duration]bool{}
	for _, c := range report.NodeComponents {
		p := w.refreshPeriodOf(Key{"cozy-system", c}, false)
		assert.LessOrEqual(t, p, 10*time.Second)
		assert.GreaterOrEqual(t, p, 7500*time.Millisecond)
		seen[p] = true
	}
	assert.Greater(t, len(seen), 1)
}

package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/aggregator/internal/status"
	"github.com/cozystack/cozy-health/pkg/reference"
	"github.com/cozystack/cozy-health/pkg/report"
)

// TestMetricTypesAsGathered: the types the node and issue tables name for
// the metrics reference (MetricTypes, read before any series exists) are
// the types their series are gathered as, once there are series of every
// metric (reference.Registry.Metrics fails on a contradiction).
func TestMetricTypesAsGathered(t *testing.T) {
	reg := reference.NewRegistry()
	m, err := New(reg)
	require.NoError(t, err)
	m.Accepted("node-1", time.Now())
	m.Publish(testNS, rolledUp(report.ComponentDisk, report.StatusDegraded, map[string]report.Status{"node-1": report.StatusDegraded}))
	issues := make([]status.Issue, MaxIssuesPerNode+1)
	for i := range issues {
		issues[i] = status.Issue{Node: "node-1", Type: "Diskstats", Reason: "LatencyHigh", Status: report.StatusDegraded, Resource: strings.Repeat("d", i+1)}
	}
	m.issues.publish(testNS, report.ComponentDisk, issues)
	gathered, err := reg.Gather()
	require.NoError(t, err)
	names := map[string]bool{}
	for _, mf := range gathered {
		names[mf.GetName()] = true
	}
	for _, name := range []string{"cozy_health_node_status", "cozy_health_node_last_report_timestamp_seconds", "cozy_health_issue", "cozy_health_issue_series_dropped"} {
		require.True(t, names[name], "%s has a series", name)
	}
	_, err = reg.Metrics()
	require.NoError(t, err)
}

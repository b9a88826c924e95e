package metrics

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/aggregator/internal/status"
	"github.com/cozystack/cozy-health/pkg/metrictest"
	"github.com/cozystack/cozy-health/pkg/report"
)

// TestIssueSeriesAreBounded: one node naming 9,000 resources exports at most
// MaxIssuesPerNode series for them, a namespace at most
// MaxIssuesPerNamespace, and what was left out is counted. Before, every
// condition was a series: 9,000 from one node's report.
func TestIssueSeriesAreBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	require.NoError(t, err)
	var issues []status.Issue
	for i := range 9000 {
		issues = append(issues, status.Issue{Node: "evil", Kind: "Resource", Resource: fmt.Sprintf("pvc-%d", i), Type: "DRBDResource", Reason: "OutOfSync", Status: report.StatusDegraded})
	}
	issues = append(issues,
		status.Issue{Node: "honest", Type: "DRBDResource", Kind: "Resource", Resource: "pvc-a", Reason: "OutOfSync", Status: report.StatusDegraded},
		status.Issue{Type: "Quorum", Reason: "SomeNodesDegraded", Status: report.StatusDegraded})
	m.issues.publish(testNS, "linstor", issues)
	n, err := testutil.GatherAndCount(reg, "cozy_health_issue")
	require.NoError(t, err)
	assert.Equal(t, MaxIssuesPerNode+2, n, "20 of the evil node, the honest node's, the component's")
	assert.Equal(t, 8980.0, gauge(t, reg, "cozy_health_issue_series_dropped"))

	// Other components of the namespace share its bound.
	for c := range 40 {
		var more []status.Issue
		for node := range 30 {
			more = append(more, status.Issue{Node: fmt.Sprintf("n%d", node), Type: "T", Reason: "R", Status: report.StatusDown})
		}
		m.issues.publish(testNS, fmt.Sprintf("c%d", c), more)
	}
	n, err = testutil.GatherAndCount(reg, "cozy_health_issue")
	require.NoError(t, err)
	assert.Equal(t, MaxIssuesPerNamespace, n)

	// A republish that drops below the bound frees the budget again.
	for c := range 40 {
		m.issues.publish(testNS, fmt.Sprintf("c%d", c), nil)
	}
	m.issues.publish(testNS, "linstor", nil)
	n, err = testutil.GatherAndCount(reg, "cozy_health_issue")
	require.NoError(t, err)
	assert.Zero(t, n)
	n, err = testutil.GatherAndCount(reg, "cozy_health_issue_series_dropped")
	require.NoError(t, err)
	assert.Zero(t, n)
}

// gauge sums every series of a gauge family.
func gauge(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	return metrictest.Sum(t, g, name)
}

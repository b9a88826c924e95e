package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/aggregator/internal/status"
	"github.com/cozystack/cozy-health/pkg/report"
)

// TestMaintenanceSeries: every node of the state has both maintenance
// series; a cordoned node within its window reads maintenance 1, past it
// overdue 1; a node-local component is held only while every entry that
// is not Healthy is a node within its window, never when Down.
func TestMaintenanceSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	require.NoError(t, err)
	etcd := func(overall report.Status, nodes map[string]report.Status) *status.Component {
		cs := &status.Component{Component: report.ComponentEtcd, Overall: overall, Source: status.FromRollup, Nodes: map[string]status.NodeState{}}
		for n, s := range nodes {
			cs.Nodes[n] = status.NodeState{Status: s}
		}
		return cs
	}
	m.SetMaintenance([]string{"a", "b", "c"}, map[string]bool{"a": true, "b": false})
	assert.Equal(t, 1.0, testutil.ToFloat64(m.maintenance.node.WithLabelValues("a")), "a within its window")
	assert.Equal(t, 0.0, testutil.ToFloat64(m.maintenance.node.WithLabelValues("b")), "b past its window")
	assert.Equal(t, 0.0, testutil.ToFloat64(m.maintenance.node.WithLabelValues("c")), "c not in maintenance")
	assert.Equal(t, 1.0, testutil.ToFloat64(m.maintenance.overdue.WithLabelValues("b")))
	assert.Equal(t, 0.0, testutil.ToFloat64(m.maintenance.overdue.WithLabelValues("a")))
	assert.Equal(t, 0.0, testutil.ToFloat64(m.maintenance.overdue.WithLabelValues("c")))

	held := func() float64 {
		return testutil.ToFloat64(m.maintenance.held.WithLabelValues("cozy-system", report.ComponentEtcd))
	}
	m.Publish("cozy-system", etcd(report.StatusDegraded, map[string]report.Status{"a": report.StatusUnknown, "b": report.StatusHealthy, "c": report.StatusHealthy}))
	assert.Equal(t, 1.0, held(), "only a, within its window, is not Healthy")
	m.Publish("cozy-system", etcd(report.StatusDegraded, map[string]report.Status{"a": report.StatusUnknown, "b": report.StatusUnknown, "c": report.StatusHealthy}))
	assert.Equal(t, 0.0, held(), "b is past its window")
	m.Publish("cozy-system", etcd(report.StatusDown, map[string]report.Status{"a": report.StatusDown, "b": report.StatusHealthy, "c": report.StatusHealthy}))
	assert.Equal(t, 0.0, held(), "Down is never held")
	m.Publish("cozy-system", etcd(report.StatusUnknown, map[string]report.Status{"a": report.StatusUnknown, "b": report.StatusHealthy, "c": report.StatusHealthy}))
	assert.Equal(t, 1.0, held())
	// a uncordoned: nothing holds the component any more.
	m.SetMaintenance([]string{"a", "b", "c"}, map[string]bool{"b": false})
	assert.Equal(t, 0.0, held())
	// c left the state: its series go.
	m.SetMaintenance([]string{"a", "b"}, map[string]bool{"b": false})
	n, err := testutil.GatherAndCount(reg, "cozy_health_node_maintenance", "cozy_health_node_maintenance_overdue")
	require.NoError(t, err)
	assert.Equal(t, 4, n, "two nodes, two series each")
}

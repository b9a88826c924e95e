package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/aggregator/internal/status"
	"github.com/cozystack/cozy-health/pkg/report"
)

const testNS = "cozy-system"

// rolledUp is a node-local component's status with the given node states.
func rolledUp(component string, overall report.Status, nodes map[string]report.Status) *status.Component {
	cs := &status.Component{Component: component, Overall: overall, Nodes: map[string]status.NodeState{}}
	for n, s := range nodes {
		cs.Nodes[n] = status.NodeState{Status: s}
	}
	return cs
}

// TestNodeSeries: one series per node and component, for the current
// status only; a status change moves it, a node that leaves a component or
// the cluster takes its series along; the last-report time is the last
// Accepted one.
func TestNodeSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	require.NoError(t, err)
	at := time.Unix(1_800_000_000, 500_000_000)
	m.Accepted("a", at.Add(-time.Second))
	m.Accepted("a", at)
	m.Accepted("b", at)
	m.Publish(testNS, rolledUp(report.ComponentDisk, report.StatusDegraded, map[string]report.Status{"a": report.StatusHealthy, "b": report.StatusDegraded}))
	m.Publish(testNS, rolledUp(report.ComponentNode, report.StatusHealthy, map[string]report.Status{"a": report.StatusHealthy, "b": report.StatusHealthy}))

	expect := func(want string) {
		t.Helper()
		require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want),
			"cozy_health_node_status", "cozy_health_node_last_report_timestamp_seconds"))
	}
	const header = `
# HELP cozy_health_node_last_report_timestamp_seconds Unix time the node's last accepted report arrived.
# TYPE cozy_health_node_last_report_timestamp_seconds gauge
# HELP cozy_health_node_status 1 for a component's current published status on a node; only the current status has a series (5,000 nodes x 6 components stay at 30,000 series).
# TYPE cozy_health_node_status gauge
`
	expect(header + `
cozy_health_node_last_report_timestamp_seconds{node="a"} 1.8000000005e+09
cozy_health_node_last_report_timestamp_seconds{node="b"} 1.8000000005e+09
cozy_health_node_status{component="disk",node="a",status="Healthy"} 1
cozy_health_node_status{component="disk",node="b",status="Degraded"} 1
cozy_health_node_status{component="node",node="a",status="Healthy"} 1
cozy_health_node_status{component="node",node="b",status="Healthy"} 1
`)
	// a worsens on disk; b leaves the disk component; then b leaves.
	m.Publish(testNS, rolledUp(report.ComponentDisk, report.StatusDown, map[string]report.Status{"a": report.StatusDown}))
	expect(header + `
cozy_health_node_last_report_timestamp_seconds{node="a"} 1.8000000005e+09
cozy_health_node_last_report_timestamp_seconds{node="b"} 1.8000000005e+09
cozy_health_node_status{component="disk",node="a",status="Down"} 1
cozy_health_node_status{component="node",node="a",status="Healthy"} 1
cozy_health_node_status{component="node",node="b",status="Healthy"} 1
`)
	m.Removed("b")
	expect(header + `
cozy_health_node_last_report_timestamp_seconds{node="a"} 1.8000000005e+09
cozy_health_node_status{component="disk",node="a",status="Down"} 1
cozy_health_node_status{component="node",node="a",status="Healthy"} 1
`)
	// A component the table does not know is ignored, not a panic.
	m.Publish(testNS, rolledUp("platform", report.StatusHealthy, map[string]report.Status{"a": report.StatusHealthy}))
}

// TestIssueSeries: one series per published condition that is not True,
// replaced per component; Healthy ones and duplicates are not exported; a
// component without issues has no series.
func TestIssueSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	require.NoError(t, err)
	m.issues.publish(testNS, report.ComponentLinstor, []status.Issue{
		{Node: "node-1", Type: "DrbdResource", Reason: "DiskOutdated", Status: report.StatusDegraded},
		{Node: "node-1", Kind: "Resource", Resource: "pvc-1", Type: "DrbdResource", Reason: "DiskOutdated", Status: report.StatusDegraded},
		{Node: "node-1", Kind: "Resource", Resource: "pvc-1", Type: "DrbdResource", Reason: "DiskOutdated", Status: report.StatusDegraded},
		{Node: "node-2", Type: "DrbdResource", Reason: "DiskUpToDate", Status: report.StatusHealthy},
	})
	m.issues.publish(testNS, report.ComponentEtcd, []status.Issue{{Type: "Quorum", Reason: "QuorumAtRisk", Status: report.StatusDegraded}})
	const header = `
# HELP cozy_health_issue 1 for every published condition that is not True (status is its severity: Degraded, Down or Unknown), with the node and the resource (kind, name) it is pinned to and its reason; node is empty for component-level conditions.
# TYPE cozy_health_issue gauge
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(header+`
cozy_health_issue{component="etcd",kind="",namespace="cozy-system",node="",reason="QuorumAtRisk",resource="",status="Degraded",type="Quorum"} 1
cozy_health_issue{component="linstor",kind="",namespace="cozy-system",node="node-1",reason="DiskOutdated",resource="",status="Degraded",type="DrbdResource"} 1
cozy_health_issue{component="linstor",kind="Resource",namespace="cozy-system",node="node-1",reason="DiskOutdated",resource="pvc-1",status="Degraded",type="DrbdResource"} 1
`), "cozy_health_issue"))
	m.issues.publish(testNS, report.ComponentLinstor, nil)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(header+`
cozy_health_issue{component="etcd",kind="",namespace="cozy-system",node="",reason="QuorumAtRisk",resource="",status="Degraded",type="Quorum"} 1
`), "cozy_health_issue"))
}

// TestPublishAdapterObject: an adapter's component in a tenant namespace
// gets its status and issue series (its True conditions none) beside the
// platform's; withdrawing it removes them and nothing else.
func TestPublishAdapterObject(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	require.NoError(t, err)
	m.issues.publish(testNS, report.ComponentEtcd, []status.Issue{{Type: "Quorum", Reason: "QuorumAtRisk", Status: report.StatusDegraded}})
	stale := func(kind string) status.Condition {
		return status.Condition{Type: "Backup", Reason: "BackupStale", Severity: report.StatusDegraded, Resource: &report.ResourceRef{Kind: kind, Namespace: "tenant-a", Name: "pg"}}
	}
	m.Publish("tenant-a", &status.Component{Component: "backups", Source: status.FromAdapters, Overall: report.StatusDegraded,
		Conditions: []status.Condition{stale("Cluster"), stale("Schedule"), {Type: "Backup", Reason: "BackupRecent", Severity: report.StatusHealthy}}})
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP cozy_health_component_status 1 for the component's current published overall status, 0 for the others.
# TYPE cozy_health_component_status gauge
cozy_health_component_status{component="backups",namespace="tenant-a",status="Degraded"} 1
cozy_health_component_status{component="backups",namespace="tenant-a",status="Down"} 0
cozy_health_component_status{component="backups",namespace="tenant-a",status="Healthy"} 0
cozy_health_component_status{component="backups",namespace="tenant-a",status="Unknown"} 0
# HELP cozy_health_issue 1 for every published condition that is not True (status is its severity: Degraded, Down or Unknown), with the node and the resource (kind, name) it is pinned to and its reason; node is empty for component-level conditions.
# TYPE cozy_health_issue gauge
cozy_health_issue{component="backups",kind="Cluster",namespace="tenant-a",node="",reason="BackupStale",resource="pg",status="Degraded",type="Backup"} 1
cozy_health_issue{component="backups",kind="Schedule",namespace="tenant-a",node="",reason="BackupStale",resource="pg",status="Degraded",type="Backup"} 1
cozy_health_issue{component="etcd",kind="",namespace="cozy-system",node="",reason="QuorumAtRisk",resource="",status="Degraded",type="Quorum"} 1
`), "cozy_health_component_status", "cozy_health_issue"))
	m.Remove("tenant-a", "backups")
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP cozy_health_issue 1 for every published condition that is not True (status is its severity: Degraded, Down or Unknown), with the node and the resource (kind, name) it is pinned to and its reason; node is empty for component-level conditions.
# TYPE cozy_health_issue gauge
cozy_health_issue{component="etcd",kind="",namespace="cozy-system",node="",reason="QuorumAtRisk",resource="",status="Degraded",type="Quorum"} 1
`), "cozy_health_component_status", "cozy_health_issue"))
}

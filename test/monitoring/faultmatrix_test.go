package monitoring

import (
	"context"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metricsql"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/test/lab"
)

// faultAlert is one row of the lab's fault matrix: an alert, the fault
// that makes it fire ("NODE[,NODE] FAULT [ARG]", as lab.Fault takes it, or
// backupFault) and the repair that resolves it, the labels that pick the
// alert out, and its expression narrowed to the fault (sel; one: a status
// gauge whose value must be 1), as it must come to hold on the scrape.
type faultAlert struct {
	alert, fault, repair string
	labels               map[string]string
	sel                  selector
	one                  bool
}

// backupFault is the one fault that is no lab fault: a CNPG Cluster whose
// last backup is 50 h old under a daily schedule (createStaleBackup),
// repaired as a backup that succeeds now (freshenBackup).
const backupFault, backupRepair = "CNPG backup 50 h old", "CNPG backup succeeded now"

// faultMatrix is the one table of the lab's faults and the alerts they
// fire. TestScrapeCrossCheck waits for each expression to hold on the
// scrape; TestAlertEvaluation (and TestAlertTiming) for each alert to fire
// and resolve on Prometheus and vmalert; docs/reference/alerts.md's tables of both are
// compared with it as sets (TestAlertTables). Both end with watchdog.
var faultMatrix = []faultAlert{
	{alert: "CozyHealthEtcdFsyncSlow", fault: "node-1 fsync-slow", repair: "node-1 fsync-ok", labels: map[string]string{"node": "node-1"},
		sel: sel("cozy_health_issue", "component", "etcd", "type", "FsyncLatency", "node", "node-1", "reason", "~FsyncLatencyHigh|BackendCommitLatencyHigh")},
	{alert: "CozyHealthComponentDegraded", fault: "node-1 fsync-slow", repair: "node-1 fsync-ok", labels: map[string]string{"component": "etcd"},
		sel: sel("cozy_health_component_status", "component", "etcd", "status", "Degraded"), one: true},
	{alert: "CozyHealthDRBDReplicaNotUpToDate", fault: "node-2 drbd-outdated pvc-lab-1", repair: "node-2 drbd-uptodate pvc-lab-1", labels: map[string]string{"node": "node-2", "resource": "pvc-lab-1"},
		sel: sel("cozy_health_issue", "type", "DrbdResource", "node", "node-2", "resource", "pvc-lab-1", "status", "~Degraded|Down")},
	// A node-local component is Down only when it is down for the
	// cluster: ovn-central's NB raft loses its quorum (node-2's and
	// node-3's NB members stopped, node-1's without a leader); node-3's
	// silent agent cannot make that loss unproven.
	{alert: "CozyHealthComponentDown", fault: "node-2,node-3 ovn-nb-stop", repair: "node-2,node-3 ovn-nb-start", labels: map[string]string{"component": "kube-ovn"},
		sel: sel("cozy_health_component_status", "component", "kube-ovn", "status", "Down"), one: true},
	// The lab renews every node's kubelet Lease: a stopped agent on a live
	// node is AgentSilent.
	{alert: "CozyHealthAgentSilent", fault: "node-3 agent-stop", repair: "node-3 agent-start", labels: map[string]string{"node": "node-3"},
		sel: sel("cozy_health_issue", "type", "Heartbeat", "reason", "AgentSilent", "node", "node-3")},
	{alert: "CozyHealthComponentUnknown", fault: "node-3 agent-stop", repair: "node-3 agent-start",
		sel: sel("cozy_health_component_status", "status", "Unknown"), one: true},
	// A split brain (node-1's replica of pvc-lab-1 and its peers
	// StandAlone toward each other, both UpToDate): no single good copy,
	// so every node's drain is blocked; the cluster is one failure from an
	// outage.
	{alert: "CozyHealthNoNodeDrainable", fault: "node-1 drbd-standalone pvc-lab-1", repair: "node-1 drbd-connected pvc-lab-1",
		sel: sel("cozy_health_drain_verdict", "verdict", "blocked", "node", "node-2"), one: true},
	{alert: "CozyHealthBackupsStale", fault: backupFault, repair: backupRepair, labels: map[string]string{"namespace": staleTenant, "resource": staleCluster},
		sel: sel("cozy_health_issue", "namespace", staleTenant, "component", "backups", "type", "Backup", "resource", staleCluster, "reason", "BackupStale", "status", "Degraded")},
}

// watchdog is the matrix's last row in both tests: every aggregator
// killed, then started again.
var watchdog = faultAlert{alert: "CozyHealthNotPublishing", fault: "every aggregator SIGKILLed", repair: "aggregator-start",
	labels: map[string]string{"cause": "NoAggregatorScraped"}}

// key is how docs/reference/alerts.md's tables name the row: the alert, and in
// parentheses the component or cause its labels pin.
func (f faultAlert) key() string {
	for _, l := range []string{"component", "cause"} {
		if v := f.labels[l]; v != "" {
			return f.alert + " (" + v + ")"
		}
	}
	return f.alert
}

// labFaults are the matrix's lab faults, each once and in order, with
// their repairs.
func labFaults() (faults, repairs []string) {
	seen := map[string]bool{}
	for _, f := range faultMatrix {
		if f.fault == backupFault || seen[f.fault] {
			continue
		}
		seen[f.fault] = true
		faults, repairs = append(faults, f.fault), append(repairs, f.repair)
	}
	return faults, repairs
}

// injectLabFault applies spec ("NODE[,NODE] FAULT [ARG]") to each of its
// nodes with lab.Fault.
func injectLabFault(ctx context.Context, t *testing.T, dir, spec string) {
	t.Helper()
	f := strings.Fields(spec)
	require.GreaterOrEqual(t, len(f), 2, "fault %q", spec)
	arg := ""
	if len(f) > 2 {
		arg = f[2]
	}
	for _, node := range strings.Split(f[0], ",") {
		msg, err := lab.Fault(ctx, dir, node, f[1], arg)
		require.NoError(t, err)
		t.Logf("%s on %s: %s", f[1], node, msg)
	}
}

// sel is metric{k=v, ...}; a value starting with ~ is a regexp.
func sel(metric string, kv ...string) selector {
	s := selector{Metric: metric}
	for i := 0; i < len(kv); i += 2 {
		s.Matchers = append(s.Matchers, labelFilter(kv[i], kv[i+1]))
	}
	return s
}

// labelFilter is l="v", or l=~"v" when v starts with ~.
func labelFilter(l, v string) metricsql.LabelFilter {
	if strings.HasPrefix(v, "~") {
		return metricsql.LabelFilter{Label: l, Value: v[1:], IsRegexp: true}
	}
	return metricsql.LabelFilter{Label: l, Value: v}
}

package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/agent/internal/app"
	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/test/harness"
	ciliumsrc "github.com/cozystack/cozy-health/test/sources/cilium"
	"github.com/cozystack/cozy-health/test/sources/drbdsetup"
	"github.com/cozystack/cozy-health/test/sources/fault"
	kubeovnsrc "github.com/cozystack/cozy-health/test/sources/kubeovn"
	"github.com/cozystack/cozy-health/test/sources/machined"
	ovssrc "github.com/cozystack/cozy-health/test/sources/ovs"
)

// node is one simulated control-plane node with every source present.
type node struct {
	args   []string
	shim   *machined.Server
	cilium *ciliumsrc.Server
	pinger *kubeovnsrc.Server
	drbd   *drbdsetup.Fake
}

func startNode(t *testing.T) *node {
	t.Helper()
	cluster := harness.StartEtcdClusterT(t, 1)
	pki, err := machined.NewPKI([]string{"127.0.0.1"}, []string{"os:reader"}, time.Hour)
	require.NoError(t, err)
	srv, err := machined.New(machined.Config{Hostname: "node-0", EtcdEndpoint: cluster.Members[0].ClientURL, TLS: pki.ServerTLS()})
	require.NoError(t, err)
	addr, err := srv.Listen("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	dir := t.TempDir()
	talosconfig := filepath.Join(dir, "talosconfig")
	require.NoError(t, pki.WriteTalosconfig(talosconfig, []string{addr}))

	sockDir, err := os.MkdirTemp("", "cil")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(sockDir) })
	cil, err := ciliumsrc.Start(filepath.Join(sockDir, "cilium.sock"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cil.Close() })
	health, err := ciliumsrc.StartHealth(filepath.Join(sockDir, "health.sock"), "node-0", map[string]string{"node-0": "10.0.0.10", "node-1": "10.0.0.11"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = health.Close() })

	// kube-ovn's sockets: ovs-ovn's ovsdb-server, ovs-vswitchd and
	// ovn-controller, and a one-member ovn-central NB and SB.
	ovsRun, ovnRun, ovnDB := filepath.Join(sockDir, "ovs"), filepath.Join(sockDir, "ovn"), filepath.Join(sockDir, "ovn-db")
	for _, d := range []string{ovsRun, ovnRun, ovnDB} {
		require.NoError(t, os.Mkdir(d, 0o700))
	}
	ovsdb, err := ovssrc.StartOVSDB(filepath.Join(ovsRun, "db.sock"), "node-0")
	require.NoError(t, err)
	t.Cleanup(ovsdb.Close)
	vswitchd, err := ovssrc.StartDaemonCtl(ovsRun, "ovs-vswitchd", 100, map[string]ovssrc.Command{
		"version": func([]string) (string, error) { return "ovs-vswitchd (Open vSwitch) 3.5.2", nil }})
	require.NoError(t, err)
	t.Cleanup(vswitchd.Close)
	controller, err := ovssrc.StartDaemonCtl(ovnRun, "ovn-controller", 101, map[string]ovssrc.Command{
		"connection-status": func([]string) (string, error) { return "connected", nil }})
	require.NoError(t, err)
	t.Cleanup(controller.Close)
	for _, db := range []struct{ name, ctl, file string }{{"OVN_Northbound", "ovnnb_db.ctl", "ovnnb_db.db"}, {"OVN_Southbound", "ovnsb_db.ctl", "ovnsb_db.db"}} {
		c := ovssrc.NewCluster(db.name)
		require.NoError(t, c.AddMember("node-0", "tcp:[10.0.0.10]:6643", filepath.Join(ovnRun, db.ctl), filepath.Join(ovnDB, db.file)))
		t.Cleanup(c.Close)
	}

	pinger, err := kubeovnsrc.Start("", kubeovnsrc.Config{Node: "node-0", NodeIP: "10.0.0.10", Targets: map[string]string{"node-1": "10.0.0.11"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pinger.Close() })
	pinger.Ping(5)

	fake, err := drbdsetup.Install(dir)
	require.NoError(t, err)
	require.NoError(t, fake.Set(upToDate("UpToDate")))
	probe := filepath.Join(dir, "probe")
	require.NoError(t, os.Mkdir(probe, 0o700))

	return &node{
		shim: srv, cilium: cil, pinger: pinger, drbd: fake,
		args: []string{
			"--node-name", "node-0",
			"--talosconfig", talosconfig,
			"--etcd-metrics-url", cluster.Members[0].MetricsURL,
			"--fsync-probe-dir", probe,
			"--fsync-probe-p99-degraded", "30s", "--fsync-probe-p99-down", "60s",
			"--proc-root", "internal/checks/diskstats/testdata/proc",
			"--diskstats-devices", "^sd[a-z]$",
			"--disk-latency-degraded", "10s", "--disk-latency-down", "20s",
			"--cilium-socket", cil.Socket,
			"--cilium-health-socket", health.Socket,
			"--kube-ovn-pinger-url", pinger.URL,
			"--ovs-db-socket", ovsdb.Path,
			"--ovn-controller-pidfile", filepath.Join(ovnRun, "ovn-controller.pid"),
			"--ovn-nb-ctl", filepath.Join(ovnRun, "ovnnb_db.ctl"),
			"--ovn-sb-ctl", filepath.Join(ovnRun, "ovnsb_db.ctl"),
			"--ovn-db-dir", ovnDB,
			"--drbdsetup", fake.Path,
			"--check-deadline", "2s",
			"--log-level", "error",
		},
	}
}

type output struct {
	Node         string `json:"node"`
	Observations []struct {
		Component   string              `json:"component"`
		Check       string              `json:"check"`
		Status      string              `json:"status"`
		Reason      string              `json:"reason"`
		Message     string              `json:"message"`
		ResourceRef *report.ResourceRef `json:"resourceRef"`
		Attributes  map[string]float64  `json:"attributes"`
	} `json:"observations"`
}

func runOnceJSON(t *testing.T, args []string) (output, int, time.Duration) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	start := time.Now()
	code := run(append([]string{"run-once", "--output", "json"}, args...), &stdout, &stderr)
	took := time.Since(start)
	var out output
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &out), "stdout: %s\nstderr: %s", stdout.String(), stderr.String())
	return out, code, took
}

func TestRunOnceEverySource(t *testing.T) {
	n := startNode(t)
	out, code, _ := runOnceJSON(t, n.args)
	assert.Equal(t, "node-0", out.Node)
	seen := map[string]string{}
	for _, o := range out.Observations {
		seen[o.Check] = o.Status
		assert.NotEmpty(t, o.Component)
		assert.NotEmpty(t, o.Reason)
		require.NotNil(t, o.ResourceRef)
	}
	for _, c := range []string{report.CheckTalosServices, report.CheckEtcdMember, report.CheckEtcdMembership, report.CheckEtcdAlarms,
		report.CheckFsyncLatency, report.CheckFsyncProbe, report.CheckDiskstats, report.CheckCiliumAgent,
		report.CheckKubeOVNPinger, report.CheckDRBDResource,
		report.CheckCiliumNodeConnectivity, report.CheckOVS, report.CheckOVNCentralMember} {
		assert.Equal(t, "Healthy", seen[c], "check %s", c)
	}
	for c := range seen {
		assert.NotContains(t, report.RenamedChecks, c, "the agent sends no check under a name the aggregator renames")
	}
	assert.Equal(t, 0, code, "%+v", out)

	// cilium-fail: exit 1.
	n.cilium.Fail("containerd socket gone")
	out, code, _ = runOnceJSON(t, n.args)
	assert.Equal(t, 1, code)
	n.cilium.Recover()

	// A failed DRBD disk + a hanging Talos API: Unknown for the Talos
	// checks, Down for the resource -> exit 1 (Down is worse than Unknown).
	require.NoError(t, n.drbd.Set(upToDate("Failed")))
	n.shim.SetHang(true)
	out, code, took := runOnceJSON(t, n.args)
	assert.Equal(t, 1, code)
	assert.Less(t, took, 6*time.Second, "about twice the 2s check deadline (plus slack for a loaded machine)")
	for _, o := range out.Observations {
		if o.Check == report.CheckEtcdMember {
			assert.Equal(t, "Unknown", o.Status)
			assert.Equal(t, report.ReasonCheckTimeout, o.Reason, o.Message)
		}
	}
	require.NoError(t, n.drbd.Set(upToDate("UpToDate")))

	// Only Unknown (hanging Talos, hanging Cilium): exit 2, still on time.
	n.cilium.Fault.Set(fault.Hang)
	_, code, took = runOnceJSON(t, n.args)
	assert.Equal(t, 2, code)
	assert.Less(t, took, 6*time.Second)
}

func TestRunOnceTextAndUsage(t *testing.T) {
	var stdout, stderr bytes.Buffer
	dir := t.TempDir()
	code := run([]string{"run-once", "--node-name", "n1", "--talosconfig", "", "--etcd-metrics-url", "", "--cilium-socket", "",
		"--cilium-health-socket", "", "--ovs-db-socket", "", "--ovn-nb-ctl", "", "--ovn-sb-ctl", "",
		"--fsync-probe-dir", dir, "--proc-root", "", "--drbdsetup", ""}, &stdout, &stderr)
	assert.Equal(t, 0, code, stderr.String())
	assert.Contains(t, stdout.String(), "fsync-probe")
	assert.Contains(t, stdout.String(), "COMPONENT")

	stdout.Reset()
	stderr.Reset()
	code = run([]string{"run-once"}, &stdout, &stderr)
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr.String(), "--node-name")

	code = run([]string{"frobnicate"}, &stdout, &stderr)
	assert.Equal(t, 2, code)
}

// TestMissingOptionalInputsDoNotStopTheAgent: on a node where the
// talosconfig and the Cilium socket are not mounted (the Secret lives in
// another namespace and its mount is optional), the
// agent still reports everything else; the checks that need them read
// Unknown with a reason that says what to mount.
func TestMissingOptionalInputsDoNotStopTheAgent(t *testing.T) {
	n := startNode(t)
	dir := t.TempDir()
	missing := filepath.Join(dir, "not-mounted")
	args := append(append([]string{}, n.args...),
		"--talosconfig", filepath.Join(missing, "config"),
		"--cilium-socket", filepath.Join(missing, "cilium.sock"),
	)
	out, code, _ := runOnceJSON(t, args)
	assert.Equal(t, app.ExitUnknown, code, "%+v", out)
	byCheck := map[string][]string{}
	for _, o := range out.Observations {
		byCheck[o.Check] = append(byCheck[o.Check], o.Status+"/"+o.Reason+": "+o.Message)
	}
	for _, c := range []string{report.CheckFsyncLatency, report.CheckFsyncProbe, report.CheckDiskstats, report.CheckKubeOVNPinger} {
		require.NotEmpty(t, byCheck[c], c)
		for _, o := range byCheck[c] {
			assert.Contains(t, o, "Healthy/", c)
		}
	}
	for c, want := range map[string]string{
		report.CheckTalosServices: "talosconfig " + filepath.Join(missing, "config") + " not found",
		report.CheckCiliumAgent:   "Cilium agent socket " + filepath.Join(missing, "cilium.sock") + " not found",
	} {
		require.Len(t, byCheck[c], 1, "%s: %v", c, byCheck)
		assert.Contains(t, byCheck[c][0], "Unknown/"+report.ReasonInputMissing+": "+want, c)
	}
	// DRBD state is read locally (drbdsetup).
	require.NotEmpty(t, byCheck[report.CheckDRBDResource])
	for _, o := range byCheck[report.CheckDRBDResource] {
		assert.Contains(t, o, "Healthy/DiskUpToDate: resource pvc-a on node-0: disk UpToDate (from drbdsetup)")
	}
}

// upToDate is one resource, pvc-a, whose local disk is in state.
func upToDate(state string) []drbdsetup.Resource {
	return []drbdsetup.Resource{{Name: "pvc-a", Role: "Secondary", Devices: []drbdsetup.Device{{Volume: 0, DiskState: state}}}}
}

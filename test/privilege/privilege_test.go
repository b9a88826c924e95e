// Package privilege measures which identity the agent needs to read each
// node-local source: the built agent's run-once is run under setpriv as
// root with every capability dropped (what the chart's agent.runAsUser 0
// with capabilities drop ALL gives), as uid 65532 alone, as uid 65532 with
// supplementary group 0, and as uid 65532 with CAP_DAC_OVERRIDE as an
// ambient capability, against real Open vSwitch and OVN from Debian's
// packages (test/ovnreal), Cilium's API sockets with the mode Cilium gives
// them, and a fsync probe directory as the kubelet creates a hostPath
// DirectoryOrCreate. agent/README.md ("Mounts") is written from it.
package privilege

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/test/harness"
	"github.com/cozystack/cozy-health/test/ovnreal"
	ciliumsrc "github.com/cozystack/cozy-health/test/sources/cilium"
)

// identity is one way to run the agent: setpriv's arguments.
type identity struct {
	name string
	args []string
}

var (
	// Every capability gone, from every set, and no way to gain one: a
	// container's process under runAsUser 0, capabilities drop ALL,
	// allowPrivilegeEscalation false.
	noCaps = []string{"--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"}

	rootNoCaps   = identity{"uid 0, no capabilities", append([]string{"--reuid=0", "--regid=0", "--clear-groups"}, noCaps...)}
	nonRoot      = identity{"uid 65532", append([]string{"--reuid=65532", "--regid=65532", "--clear-groups"}, noCaps...)}
	nonRootGroup = identity{"uid 65532, supplementary group 0", append([]string{"--reuid=65532", "--regid=65532", "--groups=0"}, noCaps...)}
	// What a runtime that sets ambient capabilities would give a non-root
	// container with capabilities add DAC_OVERRIDE.
	nonRootDAC = identity{"uid 65532, ambient CAP_DAC_OVERRIDE", []string{"--reuid=65532", "--regid=65532", "--clear-groups",
		"--inh-caps=-all,+dac_override", "--ambient-caps=+dac_override", "--bounding-set=-all,+dac_override", "--no-new-privs"}}
	// What containerd's CRI and runc give it: the capability in the
	// bounding set only (no ambient set), which an exec as non-root
	// drops from the effective set.
	nonRootBounding = identity{"uid 65532, CAP_DAC_OVERRIDE in the bounding set only", []string{"--reuid=65532", "--regid=65532", "--clear-groups",
		"--inh-caps=-all", "--bounding-set=-all,+dac_override", "--no-new-privs"}}
)

// TestAgentSourcePrivileges records the owner and mode of every socket the
// real daemons create and which identity reads which source. It fails when
// a daemon's socket modes or the identities' reach change, so the chart's
// securityContext and agent/README.md are revisited.
func TestAgentSourcePrivileges(t *testing.T) {
	harness.SkipShort(t)
	if os.Geteuid() != 0 {
		t.Fatal("this test switches uid with setpriv: run it as root (make test does)")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Fatal("setpriv (util-linux) is needed: apt-get install -y util-linux")
	}
	// runc's umask for a container's process when the spec sets none
	// (kube-ovn's ovs-ovn and ovn-central pods start the daemons so).
	old := syscall.Umask(0o022)
	t.Cleanup(func() { syscall.Umask(old) })

	// The agent, where every identity can execute it.
	base, err := os.MkdirTemp("", "priv")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	mustChmod(t, base, 0o755)
	agent := filepath.Join(base, "cozy-health-agent")
	build := exec.Command("go", "build", "-trimpath", "-o", agent, "./agent")
	build.Dir = harness.RepoRoot()
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the agent: %v\n%s", err, out)
	}

	// Real OVS and OVN: one ovn-central member, ovsdb-server, ovs-vswitchd
	// and ovn-controller, started as root as kube-ovn starts them.
	c := ovnreal.Start(t, ovnreal.Options{OVS: true, Members: 1})
	mustChmod(t, c.Dir, 0o755) // a temporary directory is 0700; a node's /run is not
	m := c.Members[0]
	n := c.Node

	// Cilium's API sockets, with the mode the Cilium agent sets
	// (pkg/api.SetDefaultPermissions: SocketFileMode 0660, owner root).
	cilDir := filepath.Join(base, "cilium")
	if err := os.Mkdir(cilDir, 0o755); err != nil {
		t.Fatal(err)
	}
	cil, err := ciliumsrc.Start(filepath.Join(cilDir, "cilium.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cil.Close() })
	health, err := ciliumsrc.StartHealth(filepath.Join(cilDir, "health.sock"), "node-0", map[string]string{"node-0": "10.0.0.10"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = health.Close() })
	for _, s := range []string{cil.Socket, health.Socket} {
		mustChmod(t, s, 0o660)
	}

	// The fsync probe's hostPath as the kubelet creates a DirectoryOrCreate
	// one: root, 0755.
	probe := filepath.Join(base, "var/lib/cozy-health")
	if err := os.MkdirAll(probe, 0o755); err != nil {
		t.Fatal(err)
	}

	// What the daemons created: owner and mode of each file the agent opens.
	files := map[string]string{
		"ovsdb-server db.sock":    n.DBSocket,
		"ovs-vswitchd .ctl":       n.VswitchdCtl(),
		"ovn-controller .ctl":     n.ControllerCtl(),
		"ovnnb_db.ctl":            m.Ctl(ovnreal.Northbound),
		"ovnsb_db.ctl":            m.Ctl(ovnreal.Southbound),
		"ovs-vswitchd.pid":        filepath.Join(n.OVSRunDir, "ovs-vswitchd.pid"),
		"ovn-controller.pid":      n.ControllerPidfile,
		"ovnnb_db.db":             m.DBFile(ovnreal.Northbound),
		"OVS rundir":              n.OVSRunDir,
		"OVN rundir":              m.RunDir,
		"OVN dbdir":               m.DBDir,
		"cilium.sock (as Cilium)": cil.Socket,
		"fsync probe dir":         probe,
	}
	modes := map[string]string{}
	for name, p := range files {
		modes[name] = ownerMode(t, p)
		t.Logf("%-24s %s  %s", name, modes[name], p)
	}
	t.Logf("%s", ovnreal.Version())
	// The control sockets: only their owner may connect (connect needs
	// write on the socket file). OVS binds them with fchmod 0770 under the
	// process umask.
	for _, s := range []string{"ovsdb-server db.sock", "ovs-vswitchd .ctl", "ovn-controller .ctl", "ovnnb_db.ctl", "ovnsb_db.ctl"} {
		if modes[s] != "0:0 Srwxr-x---" {
			t.Errorf("%s is %s, was root:root 0750 when measured: revisit the chart's agent user and agent/README.md", s, modes[s])
		}
	}

	args := []string{"run-once", "--output", "json", "--node-name", "node-0", "--interval", "10s", "--check-deadline", "4s", "--log-level", "error",
		"--talosconfig", "", "--kube-api-token-file", "", "--etcd-metrics-url", "", "--proc-root", "", "--drbdsetup", "", "--kube-ovn-pinger-url", "",
		"--cilium-socket", cil.Socket, "--cilium-health-socket", health.Socket,
		"--ovs-db-socket", n.DBSocket, "--ovn-controller-pidfile", n.ControllerPidfile,
		"--ovn-nb-ctl", m.Ctl(ovnreal.Northbound), "--ovn-sb-ctl", m.Ctl(ovnreal.Southbound), "--ovn-db-dir", m.DBDir,
		"--fsync-probe-dir", probe, "--fsync-probe-p99-degraded", "30s", "--fsync-probe-p99-down", "60s",
	}
	checks := []string{report.CheckOVS, report.CheckOVNCentralMember, report.CheckCiliumAgent, report.CheckCiliumNodeConnectivity, report.CheckFsyncProbe}
	// Which identity reads which source: Healthy, or the status/reason the
	// agent reports when it cannot.
	want := map[string]map[string]bool{
		rootNoCaps.name:      {report.CheckOVS: true, report.CheckOVNCentralMember: true, report.CheckCiliumAgent: true, report.CheckCiliumNodeConnectivity: true, report.CheckFsyncProbe: true},
		nonRoot.name:         {},
		nonRootGroup.name:    {report.CheckCiliumAgent: true, report.CheckCiliumNodeConnectivity: true},
		nonRootDAC.name:      {report.CheckOVS: true, report.CheckOVNCentralMember: true, report.CheckCiliumAgent: true, report.CheckCiliumNodeConnectivity: true, report.CheckFsyncProbe: true},
		nonRootBounding.name: {},
	}
	var table strings.Builder
	fmt.Fprintf(&table, "\n%-54s", "identity")
	for _, ch := range checks {
		fmt.Fprintf(&table, " %-26s", ch)
	}
	for _, id := range []identity{rootNoCaps, nonRoot, nonRootGroup, nonRootDAC, nonRootBounding} {
		got := runAs(t, agent, id, args)
		fmt.Fprintf(&table, "\n%-54s", id.name)
		for _, ch := range checks {
			o, ok := got[ch]
			if !ok {
				t.Errorf("%s: no %s observation", id.name, ch)
				continue
			}
			fmt.Fprintf(&table, " %-26s", o.Status+"/"+o.Reason)
			healthy := o.Status == "Healthy"
			if healthy != want[id.name][ch] {
				t.Errorf("%s: %s reads %s/%s (%s); expected healthy=%v", id.name, ch, o.Status, o.Reason, o.Message, want[id.name][ch])
			}
			if !healthy {
				if o.Status != "Unknown" {
					t.Errorf("%s: %s reads %s when the agent cannot read it, not Unknown: %s", id.name, ch, o.Status, o.Message)
				}
				t.Logf("%s: %s: %s/%s: %s", id.name, ch, o.Status, o.Reason, o.Message)
			}
		}
	}
	t.Log(table.String())
}

type observation struct {
	Check, Status, Reason, Message string
}

// runAs runs the agent's run-once under setpriv as id and returns one
// observation per check (the worst when a check reports several).
func runAs(t *testing.T, agent string, id identity, args []string) map[string]observation {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "setpriv", append(append(append([]string{}, id.args...), "--", agent), args...)...)
	cmd.Dir = "/"
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	_ = cmd.Run() // exit 0/1/2 by the observations
	var out struct {
		Observations []observation `json:"observations"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("%s: run-once output: %v\nstdout: %s\nstderr: %s", id.name, err, stdout.String(), stderr.String())
	}
	got := map[string]observation{}
	for _, o := range out.Observations {
		if prev, ok := got[o.Check]; !ok || prev.Status == "Healthy" {
			got[o.Check] = o
		}
	}
	return got
}

func mustChmod(t *testing.T, p string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

// ownerMode is "uid:gid mode" of p.
func ownerMode(t *testing.T, p string) string {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatalf("stat %s: %v", p, err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return fmt.Sprintf("%d:%d %s", st.Uid, st.Gid, fi.Mode().String())
}

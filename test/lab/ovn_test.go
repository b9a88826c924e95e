package lab

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/test/harness"
	"github.com/cozystack/cozy-health/test/ovnreal"
)

// TestLabOVNCentralIsReal: where Debian's ovn-central is installed (CI
// installs it), the lab's ovn-central members are real ovsdb-servers at the
// nodes' kube-ovn paths, and the ovn-* faults act on them by pid; the
// stand-in answers the same faults the same way (read with the upstream
// ovs-appctl).
func TestLabOVNCentralIsReal(t *testing.T) {
	harness.SkipShort(t)
	ovnreal.Require(t)
	for _, mode := range []string{"real", "stand-in"} {
		t.Run(mode, func(t *testing.T) { testLabOVNCentral(t, mode) })
	}
}

func testLabOVNCentral(t *testing.T, mode string) {
	t.Setenv(EnvOVN, mode)
	bound := map[string]net.Listener{}
	addr := func() string {
		l := listen(t)
		bound[l.Addr().String()] = l
		return l.Addr().String()
	}
	s := sourcesState(t, addr(), addr(), addr())
	base := s.Nodes[0]
	s.Nodes = nil
	for i := 1; i <= 3; i++ {
		n := base
		n.Name = fmt.Sprintf("node-%d", i)
		dir := filepath.Join(s.Dir, n.Name)
		n.OVSRun, n.OVNRun, n.OVNDBDir = filepath.Join(dir, "ovs"), filepath.Join(dir, "ovn"), filepath.Join(dir, "ovn-db")
		n.CiliumSocket, n.CiliumHealth = filepath.Join(dir, "cilium.sock"), filepath.Join(dir, "health.sock")
		n.Talos, n.EtcdMetrics = addr(), "http://"+addr()+"/metrics"
		n.Talosconfig = filepath.Join(dir, "talosconfig")
		n.OVNCentral = true
		for _, d := range []string{n.OVSRun, n.OVNRun, n.OVNDBDir} {
			require.NoError(t, os.MkdirAll(d, 0o700))
		}
		s.Nodes = append(s.Nodes, n)
	}
	d, err := startSources(s, bound)
	require.NoError(t, err)
	defer d.stop()
	ctx := context.Background()
	for _, n := range s.Nodes {
		text, err := ovnreal.Appctl(ctx, filepath.Join(n.OVNRun, "ovnnb_db.ctl"), "cluster/status", ovnreal.Northbound)
		require.NoError(t, err)
		assert.Contains(t, text, "Status: cluster member")
		assert.FileExists(t, filepath.Join(n.OVNDBDir, "ovnsb_db.db"))
	}
	ns := d.nodes["node-2"]
	msg, err := ns.fault("ovn-nb-stop", "")
	require.NoError(t, err)
	if mode == "real" {
		assert.Contains(t, msg, "real ovsdb-server")
	}
	assert.NoFileExists(t, filepath.Join(s.Nodes[1].OVNRun, "ovnnb_db.ctl"), "SIGTERM removes the control socket")
	assert.FileExists(t, filepath.Join(s.Nodes[1].OVNDBDir, "ovnnb_db.db"))
	_, err = ns.fault("ovn-nb-start", "")
	require.NoError(t, err)
	require.NoError(t, ovnreal.Poll(ctx, func() error {
		text, err := ovnreal.Appctl(ctx, filepath.Join(s.Nodes[1].OVNRun, "ovnnb_db.ctl"), "cluster/status", ovnreal.Northbound)
		if err == nil && !strings.Contains(text, "Status: cluster member") {
			err = fmt.Errorf("not a member yet: %s", text)
		}
		return err
	}))

	status := func(node int, db string) (string, error) {
		ctl := filepath.Join(s.Nodes[node].OVNRun, "ovnsb_db.ctl")
		if db == ovnreal.Northbound {
			ctl = filepath.Join(s.Nodes[node].OVNRun, "ovnnb_db.ctl")
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		return ovnreal.Appctl(cctx, ctl, "cluster/status", db)
	}

	// cluster/leave: the server runs on, answers "unknown cluster", the
	// file stays; rejoin makes it a member again.
	ns3 := d.nodes["node-3"]
	_, err = ns3.fault("ovn-sb-leave", "")
	require.NoError(t, err)
	_, err = status(2, ovnreal.Southbound)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "unknown cluster")
	assert.FileExists(t, filepath.Join(s.Nodes[2].OVNDBDir, "ovnsb_db.db"))
	_, err = ns3.fault("ovn-sb-rejoin", "")
	require.NoError(t, err)
	require.NoError(t, ovnreal.Poll(ctx, func() error {
		text, err := status(2, ovnreal.Southbound)
		if err == nil && !strings.Contains(text, "Status: cluster member") {
			err = fmt.Errorf("not a member yet: %s", text)
		}
		return err
	}))

	// Frozen: accepts, never answers; thawed, answers again.
	_, err = ns.fault("ovn-nb-freeze", "")
	require.NoError(t, err)
	_, err = status(1, ovnreal.Northbound)
	require.Error(t, err, "a frozen server does not answer")
	_, err = ns.fault("ovn-nb-thaw", "")
	require.NoError(t, err)
	require.NoError(t, ovnreal.Poll(ctx, func() error { _, err := status(1, ovnreal.Northbound); return err }))

	// The first ovn-central node runs the real Open vSwitch daemons in its
	// OVSRun/OVNRun (real mode); the per-daemon faults act on them by pid.
	ns1 := d.nodes["node-1"]
	if mode != "real" {
		_, err := ns1.fault("ovs-vswitchd-kill", "")
		require.Error(t, err, "the stand-in runs no real daemons")
		return
	}
	require.NotNil(t, ns1.realOVS)
	assert.Equal(t, filepath.Join(s.Nodes[0].OVSRun, "db.sock"), ns1.realOVS.DBSocket)
	assert.Equal(t, filepath.Join(s.Nodes[0].OVNRun, "ovn-controller.pid"), ns1.realOVS.ControllerPidfile)
	vswitchd := func() error {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := ovnreal.Appctl(cctx, ns1.realOVS.VswitchdCtl(), "version")
		return err
	}
	require.NoError(t, vswitchd())
	msg, err = ns1.fault("ovs-vswitchd-freeze", "")
	require.NoError(t, err)
	assert.Contains(t, msg, "SIGSTOP")
	require.Error(t, vswitchd(), "a frozen ovs-vswitchd does not answer")
	_, err = ns1.fault("ovs-vswitchd-thaw", "")
	require.NoError(t, err)
	require.NoError(t, ovnreal.Poll(ctx, vswitchd))
	old := ns1.realOVS.Controller.Pid()
	_, err = ns1.fault("ovn-controller-kill", "")
	require.NoError(t, err)
	assert.Zero(t, ns1.realOVS.Controller.Pid(), "SIGKILLed")
	_, err = ns1.fault("ovn-controller-start", "")
	require.NoError(t, err)
	assert.NotEqual(t, old, ns1.realOVS.Controller.Pid())
	_, err = ns1.fault("ovs-down", "")
	require.NoError(t, err)
	assert.NoFileExists(t, ns1.realOVS.DBSocket, "SIGTERM removes db.sock")
	_, err = ns1.fault("ovs-up", "")
	require.NoError(t, err)
	assert.FileExists(t, ns1.realOVS.DBSocket)
	require.NoError(t, ovnreal.Poll(ctx, vswitchd))
}

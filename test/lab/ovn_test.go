package lab

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/test/harness"
	"github.com/cozystack/cozy-health/test/ovnreal"
)

// TestLabOVNCentralIsReal: where Debian's ovn-central is installed (CI
// installs it), the lab's ovn-central members are real ovsdb-servers at the
// nodes' kube-ovn paths, and the ovn-* faults stop and start them by pid.
func TestLabOVNCentralIsReal(t *testing.T) {
	harness.SkipShort(t)
	ovnreal.Require(t)
	t.Setenv(EnvOVN, "real")
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
	assert.Contains(t, msg, "real ovsdb-server")
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
}

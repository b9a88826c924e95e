package ovs

import (
	"context"
	"encoding/json"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/agent/internal/checkkit"
	"github.com/cozystack/cozy-health/pkg/report"
	ovssrc "github.com/cozystack/cozy-health/test/sources/ovs"
)

// node is one node's ovs-ovn: ovsdb-server, ovs-vswitchd and ovn-controller
// serving their real sockets in two rundirs.
type node struct {
	db                   *ovssrc.OVSDB
	vswitchd, controller *ovssrc.Unixctl
	ovsRun, ovnRun       string
	connected            string
}

func startNode(t *testing.T) *node {
	t.Helper()
	n := &node{ovsRun: t.TempDir(), ovnRun: t.TempDir(), connected: "connected"}
	var err error
	n.db, err = ovssrc.StartOVSDB(filepath.Join(n.ovsRun, "db.sock"), "node-1")
	require.NoError(t, err)
	t.Cleanup(n.db.Close)
	n.vswitchd, err = ovssrc.StartDaemonCtl(n.ovsRun, "ovs-vswitchd", 4242, map[string]ovssrc.Command{
		"version": func([]string) (string, error) { return "ovs-vswitchd (Open vSwitch) 3.5.2", nil },
	})
	require.NoError(t, err)
	t.Cleanup(n.vswitchd.Close)
	n.controller, err = ovssrc.StartDaemonCtl(n.ovnRun, "ovn-controller", 4343, map[string]ovssrc.Command{
		"connection-status": func([]string) (string, error) { return n.connected, nil },
	})
	require.NoError(t, err)
	t.Cleanup(n.controller.Close)
	return n
}

func (n *node) check() *Check {
	return New(Config{DBSocket: filepath.Join(n.ovsRun, "db.sock"), ControllerPidfile: filepath.Join(n.ovnRun, "ovn-controller.pid")})
}

func run(t *testing.T, c *Check) report.Observation {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	obs, err := c.Run(ctx)
	require.NoError(t, err)
	require.Len(t, obs, 1)
	return obs[0]
}

func TestOVSFromItsSockets(t *testing.T) {
	n := startNode(t)
	c := n.check()

	o := run(t, c)
	assert.Equal(t, report.StatusHealthy, o.Status, o.Message)
	assert.Contains(t, o.Message, "Open vSwitch 3.5.2")
	assert.Equal(t, 4.0, o.Attributes[report.AttrInterfaces])
	assert.Equal(t, 0.0, o.Attributes[report.AttrInterfacesWithErrors])

	// A pod's port left behind: ovs-vswitchd cannot open its device.
	n.db.SetInterface(ovssrc.Interface{Name: "0a1b2c3d4e5f_h", OFPort: 7, Error: "could not open network device 0a1b2c3d4e5f_h (No such device)",
		ExternalIDs: map[string]string{"iface-id": "web-0.tenant-a", "pod_name": "web-0", "pod_namespace": "tenant-a"}})
	o = run(t, c)
	assert.Equal(t, report.StatusDegraded, o.Status)
	assert.Equal(t, ReasonInterfaceErrors, o.Reason)
	assert.Contains(t, o.Message, "pod tenant-a/web-0")
	assert.Equal(t, 1.0, o.Attributes[report.AttrInterfacesWithErrors])
	n.db.DeleteInterface("0a1b2c3d4e5f_h")

	n.connected = "not connected"
	o = run(t, c)
	assert.Equal(t, report.StatusDegraded, o.Status)
	assert.Equal(t, ReasonOVNControllerNotConnected, o.Reason)
	n.connected = "connected"

	n.controller.Close()
	o = run(t, c)
	assert.Equal(t, report.StatusDown, o.Status)
	assert.Equal(t, ReasonOVNControllerNotRunning, o.Reason)

	// A wedged ovs-vswitchd: Unknown for it, within the check's deadline,
	// and the other facts still reported.
	n.vswitchd.SetHang(true)
	start := time.Now()
	o = run(t, c)
	assert.Less(t, time.Since(start), time.Second, "a quarter of the 2 s deadline")
	assert.Equal(t, report.StatusDown, o.Status, "ovn-controller still down")
	assert.Contains(t, o.Message, "ovs-vswitchd version")
	assert.Contains(t, o.Message, "ovsdb-server up")

	n.vswitchd.Close()
	o = run(t, c)
	assert.Equal(t, report.StatusDown, o.Status)
	assert.Contains(t, o.Message, "ovs-vswitchd not running")

	// ovsdb-server hangs: Unknown for it within half the deadline, and
	// the daemons still reported.
	n.db.SetHang(true)
	start = time.Now()
	o = run(t, c)
	assert.Equal(t, report.StatusDown, o.Status, "ovs-vswitchd is still reported not running: %s", o.Message)
	assert.Contains(t, o.Message, "did not answer in time")
	assert.Contains(t, o.Message, "ovs-vswitchd not running")
	assert.Less(t, time.Since(start), 1500*time.Millisecond, "half of the 2 s deadline, then the daemons")
	assert.Nil(t, o.Attributes, "interfaces not read: no count")
	n.db.SetHang(false)

	// ovs-ovn gone from this node: the socket is gone.
	n.db.Close()
	o = run(t, c)
	assert.Equal(t, report.StatusDown, o.Status)
	assert.Equal(t, ReasonOVSDBSocketMissing, o.Reason)
	assert.Contains(t, o.Message, "ovs-ovn does not run on this node")

	_, err := New(Config{}).Run(context.Background())
	require.ErrorIs(t, err, checkkit.ErrNotApplicable)
}

func TestOVSDBSocketLeftBehind(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "db.sock")
	// A socket file nothing listens on, as a SIGKILLed ovsdb-server leaves.
	require.NoError(t, writeDeadSocket(sock))
	o := run(t, New(Config{DBSocket: sock}))
	assert.Equal(t, report.StatusDown, o.Status)
	assert.Equal(t, ReasonOVSDBNotListening, o.Reason)
}

func TestParseTransactRealShapes(t *testing.T) {
	// RFC 7047 values: an optional column is the atom or the empty set, a
	// map is ["map", [[k, v]...]].
	raw := `[{"rows":[{"ovs_version":"3.5.2"}]},{"rows":[
	 {"name":"br-int","type":"internal","ofport":65534,"error":["set",[]],"link_state":"down","external_ids":["map",[]]},
	 {"name":"x_h","type":"","ofport":-1,"error":"could not open network device x_h (No such device)","link_state":["set",[]],"external_ids":["map",[["iface-id","p.ns"]]]},
	 {"name":"y_h","type":"","ofport":["set",[]],"error":["set",[]],"link_state":["set",[]],"external_ids":["map",[]]}]}]`
	var results []json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(raw), &results))
	db, err := ParseTransact(results)
	require.NoError(t, err)
	assert.Equal(t, "3.5.2", db.OVSVersion)
	require.Len(t, db.Interfaces, 3)
	assert.Equal(t, -1, db.Interfaces[1].OFPort)
	assert.Equal(t, "p.ns", db.Interfaces[1].ExternalIDs["iface-id"])
	assert.Equal(t, 0, db.Interfaces[2].OFPort)

	require.NoError(t, json.Unmarshal([]byte(`[{"rows":[]},{"rows":[]}]`), &results))
	db, err = ParseTransact(results)
	require.NoError(t, err)
	assert.Nil(t, db, "no root row")

	require.NoError(t, json.Unmarshal([]byte(`[{"rows":[{"ovs_version":["set",["a","b"],1]}]},{"rows":[]}]`), &results))
	_, err = ParseTransact(results)
	require.Error(t, err)
	require.NoError(t, json.Unmarshal([]byte(`[{"error":"unknown table","details":"no table named Interface"}]`), &results))
	_, err = ParseTransact(results)
	require.Error(t, err)
}

func FuzzParseTransact(f *testing.F) {
	f.Add([]byte(`[{"rows":[{"ovs_version":"3.5.2"}]},{"rows":[{"name":"a","ofport":["set",[]],"external_ids":["map",[["k","v"]]]}]}]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var results []json.RawMessage
		if json.Unmarshal(b, &results) != nil {
			return
		}
		_, _ = ParseTransact(results)
	})
}

// writeDeadSocket leaves a unix socket file at path with no listener.
func writeDeadSocket(path string) error {
	ln, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	return ln.Close()
}

package ovncentral

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/agent/internal/check"
	"github.com/cozystack/cozy-health/pkg/report"
	ovssrc "github.com/cozystack/cozy-health/test/sources/ovs"
)

// kubeovnDocSample is `kubectl ko nb status` as printed in kube-ovn's
// documentation (OVN DB Backup and Recovery), i.e. ovn-appctl cluster/status
// of a real OVN_Northbound leader.
const kubeovnDocSample = `9182
Name: OVN_Northbound
Cluster ID: e75f (e75fa340-49ed-45ab-990e-26cb865ebc85)
Server ID: 9182 (9182e8dd-b5b0-4dd8-8518-598cc1e374f3)
Address: tcp:[10.0.128.61]:6643
Status: cluster member
Role: leader
Term: 1454
Leader: self
Vote: self

Last Election started 1732603 ms ago, reason: timeout
Last Election won: 1732587 ms ago
Election timer: 1000
Log: [7332, 12512]
Entries not yet committed: 1
Entries not yet applied: 1
Connections: ->f080 <-f080 <-e631 ->e631
Disconnections: 1
Servers:
    f080 (f080 at tcp:[10.0.129.139]:6643) next_index=12512 match_index=12510 last msg 63 ms ago
    9182 (9182 at tcp:[10.0.128.61]:6643) (self) next_index=10394 match_index=12510
    e631 (e631 at tcp:[10.0.131.173]:6643) next_index=12512 match_index=0
`

func TestParseRealSample(t *testing.T) {
	st, err := Parse(kubeovnDocSample)
	require.NoError(t, err)
	assert.Equal(t, "9182", st.ServerID)
	assert.Equal(t, "OVN_Northbound", st.Name)
	assert.Equal(t, "cluster member", st.Status)
	assert.Equal(t, "leader", st.Role)
	assert.Equal(t, uint64(1454), st.Term)
	assert.Equal(t, "self", st.Leader)
	assert.Equal(t, []string{"e631", "f080"}, st.Connected)
	require.Len(t, st.Servers, 3)
	assert.True(t, st.Servers[1].Self)
	assert.Equal(t, "tcp:[10.0.129.139]:6643", st.Servers[0].Address)

	o := Judge(st)
	assert.Equal(t, report.StatusHealthy, o.Status)
	assert.Equal(t, 3.0, o.Attributes[report.AttrRaftServers])
	assert.Equal(t, 1.0, o.Attributes[report.AttrIsLeader])
	assert.Equal(t, 2.0, o.Attributes[report.AttrRaftConnectedPeers])
	assert.Equal(t, 1454.0, o.Attributes[report.AttrRaftTerm])

	_, err = Parse("unknown cluster\n")
	require.Error(t, err)
}

func FuzzParse(f *testing.F) {
	f.Add(kubeovnDocSample)
	f.Add("a\nName: x\nStatus: failed\nRole: candidate\nConnections: (->ab) <-\nServers:\n    ab\n")
	f.Fuzz(func(t *testing.T, s string) {
		st, err := Parse(s)
		if err != nil {
			return
		}
		o := Judge(st)
		if o.Attributes[report.AttrRaftConnectedPeers] > o.Attributes[report.AttrRaftServers] {
			t.Fatalf("more connected peers than servers: %v", o.Attributes)
		}
	})
}

// cluster is a 3-member NB and SB cluster across node-1..3, each node with
// its /var/run/ovn and OVN_DIR (/var/lib/ovn in Cozystack).
type cluster struct {
	nb, sb *ovssrc.Cluster
	run    map[string]string
	dbdir  map[string]string
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	c := &cluster{nb: ovssrc.NewCluster(Northbound), sb: ovssrc.NewCluster(Southbound), run: map[string]string{}, dbdir: map[string]string{}}
	t.Cleanup(c.nb.Close)
	t.Cleanup(c.sb.Close)
	for i := 1; i <= 3; i++ {
		n := fmt.Sprintf("node-%d", i)
		c.run[n], c.dbdir[n] = t.TempDir(), t.TempDir()
		require.NoError(t, c.nb.AddMember(n, fmt.Sprintf("tcp:[10.0.0.%d]:6643", 10+i), filepath.Join(c.run[n], "ovnnb_db.ctl"), filepath.Join(c.dbdir[n], "ovnnb_db.db")))
		require.NoError(t, c.sb.AddMember(n, fmt.Sprintf("tcp:[10.0.0.%d]:6644", 10+i), filepath.Join(c.run[n], "ovnsb_db.ctl"), filepath.Join(c.dbdir[n], "ovnsb_db.db")))
	}
	return c
}

func (c *cluster) check(node string) *Check {
	return New(Config{NBCtl: filepath.Join(c.run[node], "ovnnb_db.ctl"), SBCtl: filepath.Join(c.run[node], "ovnsb_db.ctl"), DBDir: c.dbdir[node]})
}

func run(t *testing.T, c *Check) map[string]report.Observation {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	obs, err := c.Run(ctx)
	require.NoError(t, err)
	out := map[string]report.Observation{}
	for _, o := range obs {
		require.NotNil(t, o.ResourceRef)
		assert.Equal(t, report.KindOVNDatabase, o.ResourceRef.Kind)
		out[o.ResourceRef.Name] = o
	}
	return out
}

func TestMembersThroughTheirControlSockets(t *testing.T) {
	c := startCluster(t)
	leaders := 0
	for _, n := range []string{"node-1", "node-2", "node-3"} {
		obs := run(t, c.check(n))
		require.Len(t, obs, 2, n)
		for db, o := range obs {
			assert.Equal(t, report.StatusHealthy, o.Status, "%s %s: %s", n, db, o.Message)
			assert.Equal(t, 3.0, o.Attributes[report.AttrRaftServers])
			assert.Equal(t, 2.0, o.Attributes[report.AttrRaftConnectedPeers])
			if db == Northbound {
				leaders += int(o.Attributes[report.AttrIsLeader])
			}
		}
	}
	assert.Equal(t, 1, leaders, "one NB leader")

	// node-2's ovn-central is gone: its member is Down there (the database
	// file says it hosts one); the others keep quorum and see it
	// disconnected.
	require.NoError(t, c.nb.Stop("node-2"))
	require.NoError(t, c.sb.Stop("node-2"))
	obs := run(t, c.check("node-2"))
	require.Len(t, obs, 2)
	for _, o := range obs {
		assert.Equal(t, report.StatusDown, o.Status)
		assert.Equal(t, ReasonMemberNotRunning, o.Reason)
	}
	obs = run(t, c.check("node-1"))
	assert.Equal(t, report.StatusHealthy, obs[Northbound].Status, obs[Northbound].Message)
	assert.Equal(t, 1.0, obs[Northbound].Attributes[report.AttrRaftConnectedPeers])
	assert.Contains(t, obs[Northbound].Message, "1 of 2 peers connected")

	// NB loses a second member: no quorum, the survivor is a candidate
	// without a leader; SB (2 of 3 running) still has one.
	require.NoError(t, c.nb.Stop("node-3"))
	obs = run(t, c.check("node-1"))
	assert.Equal(t, report.StatusDown, obs[Northbound].Status)
	assert.Equal(t, ReasonNoLeader, obs[Northbound].Reason)
	assert.Contains(t, obs[Northbound].Message, "role candidate")
	assert.Contains(t, obs[Northbound].Message, "leader unknown")
	assert.Equal(t, report.StatusHealthy, obs[Southbound].Status)

	require.NoError(t, c.nb.Start("node-2"))
	require.NoError(t, c.nb.Start("node-3"))
	obs = run(t, c.check("node-1"))
	assert.Equal(t, report.StatusHealthy, obs[Northbound].Status, obs[Northbound].Message)
}

func TestNoMemberHere(t *testing.T) {
	dir := t.TempDir()
	c := New(Config{NBCtl: filepath.Join(dir, "ovnnb_db.ctl"), SBCtl: filepath.Join(dir, "ovnsb_db.ctl"), DBDir: filepath.Join(dir, "etc")})
	_, err := c.Run(context.Background())
	require.ErrorIs(t, err, check.ErrNotApplicable)
	_, err = New(Config{}).Run(context.Background())
	require.ErrorIs(t, err, check.ErrNotApplicable)
}

func TestBadControlSockets(t *testing.T) {
	dir := t.TempDir()
	nb, sb := filepath.Join(dir, "ovnnb_db.ctl"), filepath.Join(dir, "ovnsb_db.ctl")
	// A socket file a SIGKILLed ovsdb-server left behind.
	ln, err := net.Listen("unix", nb)
	require.NoError(t, err)
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	require.NoError(t, ln.Close())
	// An ovsdb-server whose SB database is not clustered answers
	// "unknown cluster" (raft_unixctl_status).
	u, err := ovssrc.StartUnixctl(sb, map[string]ovssrc.Command{
		"cluster/status": func([]string) (string, error) { return "", fmt.Errorf("unknown cluster") },
	})
	require.NoError(t, err)
	defer u.Close()
	obs := run(t, New(Config{NBCtl: nb, SBCtl: sb}))
	assert.Equal(t, ReasonMemberNotListening, obs[Northbound].Reason)
	assert.Equal(t, report.StatusDown, obs[Northbound].Status)
	assert.Equal(t, report.StatusUnknown, obs[Southbound].Status)
	assert.Contains(t, obs[Southbound].Message, "unknown cluster")

	// A wedged ovsdb-server: the check fails at its deadline.
	u.SetHang(true)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	require.NoError(t, os.Remove(nb))
	_, err = New(Config{NBCtl: nb, SBCtl: sb}).Run(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

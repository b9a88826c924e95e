package ovncentral

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

	"github.com/cozystack/cozy-health/agent/internal/checkkit"
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

// TestLeftMember: after cluster/leave the member's server runs on and
// answers "unknown cluster" while its database file stays: Down
// (MemberLeftCluster), and the others count one server less.
func TestLeftMember(t *testing.T) {
	c := startCluster(t)
	require.NoError(t, c.sb.Leave("node-3"))
	obs := run(t, c.check("node-3"))
	assert.Equal(t, report.StatusDown, obs[Southbound].Status)
	assert.Equal(t, ReasonMemberLeftCluster, obs[Southbound].Reason)
	assert.Equal(t, report.StatusHealthy, obs[Northbound].Status)
	obs = run(t, c.check("node-1"))
	assert.Equal(t, report.StatusHealthy, obs[Southbound].Status, obs[Southbound].Message)
	assert.Equal(t, 2.0, obs[Southbound].Attributes[report.AttrRaftServers])
	require.NoError(t, c.sb.Rejoin("node-3"))
	obs = run(t, c.check("node-3"))
	assert.Equal(t, report.StatusHealthy, obs[Southbound].Status, obs[Southbound].Message)
}

func TestNoMemberHere(t *testing.T) {
	dir := t.TempDir()
	dbdir := filepath.Join(dir, "ovn-db")
	require.NoError(t, os.Mkdir(dbdir, 0o755))
	c := New(Config{NBCtl: filepath.Join(dir, "ovnnb_db.ctl"), SBCtl: filepath.Join(dir, "ovnsb_db.ctl"), DBDir: dbdir})
	_, err := c.Run(context.Background())
	require.ErrorIs(t, err, checkkit.ErrNotApplicable)
	_, err = New(Config{}).Run(context.Background())
	require.ErrorIs(t, err, checkkit.ErrNotApplicable)
}

// TestCannotTellIsNotNotApplicable is issue 22 item 2 for ovn-central: a
// node whose OVN_DIR cannot be read (the hostPath mount failed, the
// directory is gone or unreadable) may host a member; "could not ask" is an
// error the runner reports Unknown, naming what is missing, never
// NotApplicable (which the drain rule reads as "no member here").
func TestCannotTellIsNotNotApplicable(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "var-lib-ovn")
	c := New(Config{NBCtl: filepath.Join(dir, "ovnnb_db.ctl"), SBCtl: filepath.Join(dir, "ovnsb_db.ctl"), DBDir: missing})
	_, err := c.Run(context.Background())
	require.Error(t, err)
	require.NotErrorIs(t, err, checkkit.ErrNotApplicable)
	assert.Contains(t, err.Error(), missing)
	assert.Contains(t, err.Error(), "cannot tell whether this node hosts an ovn-central member")

	// A database file that cannot be stat'ed (a directory where the
	// file should be is the portable way to make stat fail otherwise
	// than "not exist": a file under a non-directory).
	notDir := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(notDir, nil, 0o644))
	_, err = New(Config{NBCtl: filepath.Join(dir, "ovnnb_db.ctl"), DBDir: notDir}).Run(context.Background())
	require.Error(t, err)
	require.NotErrorIs(t, err, checkkit.ErrNotApplicable)
}

// TestDebianSamples judges the cluster/status texts recorded from Debian's
// ovn-central on this machine (testdata/*.txt, written by
// TestRealOVNCentral -record-samples).
func TestDebianSamples(t *testing.T) {
	for name, want := range map[string]struct {
		status    report.Status
		reason    string
		connected float64
	}{
		"leader":               {report.StatusHealthy, ReasonClusterMember, 2},
		"follower":             {report.StatusHealthy, ReasonClusterMember, 2},
		"leader-one-peer-down": {report.StatusHealthy, ReasonClusterMember, 1},
		"leader-lost-majority": {report.StatusDegraded, ReasonLeaderLostMajority, 0},
		"candidate":            {report.StatusDown, ReasonNoLeader, 0},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", name+".txt"))
			require.NoError(t, err)
			text := string(b)
			require.True(t, strings.HasPrefix(text, "# cluster/status from Debian ovn-central"))
			text = text[strings.Index(text, "\n")+1:]
			st, err := Parse(text)
			require.NoError(t, err)
			o := Judge(st)
			assert.Equal(t, want.status, o.Status, o.Message)
			assert.Equal(t, want.reason, o.Reason)
			assert.Equal(t, want.connected, o.Attributes[report.AttrRaftConnectedPeers])
			assert.Equal(t, 3.0, o.Attributes[report.AttrRaftServers])
		})
	}
}

func TestBadControlSockets(t *testing.T) {
	dir := t.TempDir()
	nb, sb := filepath.Join(dir, "ovnnb_db.ctl"), filepath.Join(dir, "ovnsb_db.ctl")
	// A socket file a SIGKILLed ovsdb-server left behind.
	ln, err := net.Listen("unix", nb)
	require.NoError(t, err)
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	require.NoError(t, ln.Close())
	// An ovsdb-server whose SB database is not clustered has no cluster/
	// commands (`"cluster/status" is not a valid command`, as Debian's
	// ovsdb-server 3.1 answers); its storage status is what kube-ovn reads.
	storage := "status: ok"
	u, err := ovssrc.StartUnixctl(sb, map[string]ovssrc.Command{
		"ovsdb-server/get-db-storage-status": func([]string) (string, error) { return storage, nil },
	})
	require.NoError(t, err)
	defer u.Close()
	obs := run(t, New(Config{NBCtl: nb, SBCtl: sb}))
	assert.Equal(t, ReasonMemberNotListening, obs[Northbound].Reason)
	assert.Equal(t, report.StatusDown, obs[Northbound].Status)
	assert.Equal(t, report.StatusHealthy, obs[Southbound].Status, obs[Southbound].Message)
	assert.Equal(t, ReasonStandalone, obs[Southbound].Reason)
	storage = "status: ovsdb error: I/O error"
	obs = run(t, New(Config{NBCtl: nb, SBCtl: sb}))
	assert.Equal(t, report.StatusDown, obs[Southbound].Status)
	assert.Equal(t, ReasonStorageError, obs[Southbound].Reason)
	assert.Contains(t, obs[Southbound].Message, "I/O error")

	// A wedged ovsdb-server: its database reads Unknown within its share
	// of the deadline, naming the database.
	u.SetHang(true)
	require.NoError(t, os.Remove(nb))
	obs = run(t, New(Config{NBCtl: nb, SBCtl: sb}))
	assert.Equal(t, report.StatusUnknown, obs[Southbound].Status)
	assert.Equal(t, ReasonStatusTimeout, obs[Southbound].Reason)
	assert.Contains(t, obs[Southbound].Message, Southbound)
}

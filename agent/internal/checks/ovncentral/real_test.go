package ovncentral

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/test/harness"
	"github.com/cozystack/cozy-health/test/ovnreal"
)

var recordSamples = flag.Bool("record-samples", false, "write the real cluster/status texts under testdata/")

// verdictBound is how long a fault may take to reach its verdict before
// the test fails: generous, the figures logged are what is measured.
const verdictBound = 30 * time.Second

// real is the check against one member of a real cluster.
type real struct {
	t       *testing.T
	c       *ovnreal.Cluster
	timings []string
}

func (r *real) check(i int) *Check {
	m := r.c.Members[i]
	return New(Config{NBCtl: m.Ctl(Northbound), SBCtl: m.Ctl(Southbound), DBDir: m.DBDir})
}

// read runs the check on member i with the agent's shape of deadline.
func read(c *Check, deadline time.Duration) (map[string]report.Observation, error) {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	obs, err := c.Run(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]report.Observation{}
	for _, o := range obs {
		if o.ResourceRef == nil || o.ResourceRef.Kind != report.KindOVNDatabase {
			return nil, fmt.Errorf("observation without its OVNDatabase: %+v", o)
		}
		out[o.ResourceRef.Name] = o
	}
	return out, nil
}

// until polls member i's check until db reads status/reason, and logs and
// returns the time from since to that verdict.
func (r *real) until(fault string, since time.Time, i int, db string, status report.Status, reason string) report.Observation {
	r.t.Helper()
	deadline := time.Now().Add(verdictBound)
	var last string
	for {
		obs, err := read(r.check(i), 2*time.Second)
		if err == nil {
			o, ok := obs[db]
			if ok && o.Status == status && o.Reason == reason {
				d := time.Since(since)
				line := fmt.Sprintf("%-34s member %d %-15s %s/%s after %s", fault, i+1, db, status, reason, d.Round(time.Millisecond))
				r.t.Log(line)
				r.timings = append(r.timings, line)
				return o
			}
			last = fmt.Sprintf("%s/%s: %s", o.Status, o.Reason, o.Message)
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%s: member %d %s did not read %s/%s within %s; last: %s", fault, i+1, db, status, reason, verdictBound, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (r *real) healthy(fault string, since time.Time, db string) {
	r.t.Helper()
	for i, m := range r.c.Members {
		if m.Server(db).Pid() != 0 {
			r.until(fault, since, i, db, report.StatusHealthy, ReasonClusterMember)
		}
	}
}

func (r *real) leader(db string) int {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), verdictBound)
	defer cancel()
	l, err := r.c.WaitLeader(ctx, db)
	require.NoError(r.t, err)
	return l
}

func (r *real) record(name, text string) {
	if !*recordSamples {
		return
	}
	header := fmt.Sprintf("# cluster/status from Debian ovn-central on this machine (%s), recorded by real_test.go -record-samples\n", ovnreal.Version())
	require.NoError(r.t, os.WriteFile(filepath.Join("testdata", name+".txt"), []byte(header+text), 0o644))
}

func (r *real) status(i int, db string) string {
	r.t.Helper()
	text, err := r.c.ClusterStatus(context.Background(), i, db)
	require.NoError(r.t, err)
	return text
}

// TestRealOVNCentral runs the check against a real 3-member ovn-central
// (Debian's ovn-central: NB and SB raft clusters on loopback, ovn-northd)
// and asserts every verdict, with the time to it, for each fault.
func TestRealOVNCentral(t *testing.T) {
	harness.SkipShort(t)
	c := ovnreal.Start(t, ovnreal.Options{Northd: true})
	r := &real{t: t, c: c}
	t.Cleanup(func() {
		t.Logf("real OVN (%s), time to verdict per fault:\n%s", ovnreal.Version(), strings.Join(r.timings, "\n"))
	})

	t.Run("healthy", func(t *testing.T) {
		r.t = t
		r.healthy("start", time.Now(), Northbound)
		r.healthy("start", time.Now(), Southbound)
		l := r.leader(Northbound)
		obs, err := read(r.check(l), 2*time.Second)
		require.NoError(t, err)
		assert.Equal(t, 1.0, obs[Northbound].Attributes[report.AttrIsLeader])
		assert.Equal(t, 3.0, obs[Northbound].Attributes[report.AttrRaftServers])
		assert.Equal(t, 2.0, obs[Northbound].Attributes[report.AttrRaftConnectedPeers])
		r.record("leader", r.status(l, Northbound))
		r.record("follower", r.status((l+1)%3, Northbound))
	})

	t.Run("follower stopped", func(t *testing.T) {
		r.t = t
		l := r.leader(Northbound)
		f := (l + 1) % 3
		t0 := time.Now()
		require.NoError(t, c.Members[f].NB.Stop(syscall.SIGTERM))
		r.until("follower SIGTERM", t0, f, Northbound, report.StatusDown, ReasonMemberNotRunning)
		o := r.until("follower SIGTERM (leader's view)", t0, l, Northbound, report.StatusHealthy, ReasonClusterMember)
		require.Eventually(t, func() bool {
			obs, err := read(r.check(l), 2*time.Second)
			o = obs[Northbound]
			return err == nil && o.Attributes[report.AttrRaftConnectedPeers] == 1
		}, verdictBound, 50*time.Millisecond, "the leader sees one peer: %s", o.Message)
		r.record("leader-one-peer-down", r.status(l, Northbound))
		t0 = time.Now()
		require.NoError(t, c.Members[f].NB.Start())
		r.healthy("follower restarted", t0, Northbound)
	})

	t.Run("leader killed", func(t *testing.T) {
		r.t = t
		l := r.leader(Northbound)
		t0 := time.Now()
		require.NoError(t, c.Members[l].NB.Stop(syscall.SIGKILL))
		// SIGKILL leaves the control socket behind: nothing accepts.
		r.until("leader SIGKILL", t0, l, Northbound, report.StatusDown, ReasonMemberNotListening)
		// The followers elect a new leader after an election timeout; the
		// time to it is the time until a member's check says it leads.
		var next int
		require.Eventually(t, func() bool {
			for i := range c.Members {
				if i == l {
					continue
				}
				obs, err := read(r.check(i), 2*time.Second)
				if err == nil && obs[Northbound].Status == report.StatusHealthy && obs[Northbound].Attributes[report.AttrIsLeader] == 1 {
					next = i
					return true
				}
			}
			return false
		}, verdictBound, 50*time.Millisecond, "no new NB leader")
		line := fmt.Sprintf("%-34s member %d %-15s Healthy/ClusterMember as the new leader after %s", "leader SIGKILL (new leader)", next+1, Northbound, time.Since(t0).Round(time.Millisecond))
		t.Log(line)
		r.timings = append(r.timings, line)
		o := r.until("leader SIGKILL (new leader's view)", t0, next, Northbound, report.StatusHealthy, ReasonClusterMember)
		assert.Equal(t, 1.0, o.Attributes[report.AttrRaftConnectedPeers], "the new leader sees the one other survivor: %s", o.Message)
		t0 = time.Now()
		require.NoError(t, c.Members[l].NB.Start())
		r.healthy("old leader restarted", t0, Northbound)
	})

	// Issue 22 item 9: a frozen NB server must not hide the SB member.
	t.Run("frozen server", func(t *testing.T) {
		r.t = t
		f := (r.leader(Northbound) + 1) % 3
		t0 := time.Now()
		require.NoError(t, c.Members[f].NB.Signal(syscall.SIGSTOP))
		defer func() { _ = c.Members[f].NB.Signal(syscall.SIGCONT) }()
		o := r.until("NB SIGSTOP", t0, f, Northbound, report.StatusUnknown, ReasonStatusTimeout)
		assert.Contains(t, o.Message, Northbound)
		obs, err := read(r.check(f), 2*time.Second)
		require.NoError(t, err)
		assert.Equal(t, report.StatusHealthy, obs[Southbound].Status, "the healthy SB member is still reported: %s", obs[Southbound].Message)
		require.NoError(t, c.Members[f].NB.Signal(syscall.SIGCONT))
		r.healthy("NB SIGCONT", time.Now(), Northbound)
	})

	// Issue 22 item 10: the leader that lost its majority reads Degraded at
	// once, then Down (NoLeader) when OVS steps it down.
	t.Run("quorum lost", func(t *testing.T) {
		r.t = t
		// OVS steps a leader without a majority down after an election
		// timeout: 4 s leaves the Degraded window wide enough to be seen
		// on a loaded machine.
		ctx, cancel := context.WithTimeout(context.Background(), verdictBound)
		defer cancel()
		require.NoError(t, c.SetElectionTimer(ctx, Southbound, 4000))
		l := r.leader(Southbound)
		t0 := time.Now()
		var stopped []int
		for i := range c.Members {
			if i != l {
				require.NoError(t, c.Members[i].SB.Stop(syscall.SIGTERM))
				stopped = append(stopped, i)
			}
		}
		leaderText := r.status(l, Southbound)
		o := r.until("quorum lost (leader, 2 of 3 down)", t0, l, Southbound, report.StatusDegraded, ReasonLeaderLostMajority)
		assert.Contains(t, o.Message, "fewer than the 2 a majority needs")
		r.record("leader-lost-majority", leaderText)
		for _, i := range stopped {
			r.until("quorum lost (stopped member)", t0, i, Southbound, report.StatusDown, ReasonMemberNotRunning)
		}
		r.until("quorum lost (leader steps down)", t0, l, Southbound, report.StatusDown, ReasonNoLeader)
		r.record("candidate", r.status(l, Southbound))
		t0 = time.Now()
		for _, i := range stopped {
			require.NoError(t, c.Members[i].SB.Start())
		}
		r.leader(Southbound)
		r.healthy("quorum back", t0, Southbound)
		require.NoError(t, c.SetElectionTimer(ctx, Southbound, 1000))
	})

	// Issue 22 item 8: a member that left the cluster is Down, not Unknown.
	t.Run("member left", func(t *testing.T) {
		r.t = t
		f := (r.leader(Southbound) + 1) % 3
		ctx, cancel := context.WithTimeout(context.Background(), verdictBound)
		defer cancel()
		t0 := time.Now()
		require.NoError(t, c.Leave(ctx, f, Southbound))
		o := r.until("cluster/leave", t0, f, Southbound, report.StatusDown, ReasonMemberLeftCluster)
		assert.Contains(t, o.Message, c.Members[f].DBFile(Southbound))
		for i := range c.Members {
			if i != f {
				o := r.until("cluster/leave (others)", t0, i, Southbound, report.StatusHealthy, ReasonClusterMember)
				assert.Equal(t, 2.0, o.Attributes[report.AttrRaftServers], "the others count 2 servers")
			}
		}
		t0 = time.Now()
		require.NoError(t, c.Rejoin(ctx, f, Southbound))
		r.healthy("rejoined", t0, Southbound)
	})
}

// TestRealStandalone is issue 22 item 11: a non-clustered database has no
// cluster/ commands; the check reads its storage status as kube-ovn does.
func TestRealStandalone(t *testing.T) {
	harness.SkipShort(t)
	m := ovnreal.StartStandalone(t, Southbound)
	text, err := ovnreal.Appctl(context.Background(), m.Ctl(Southbound), "cluster/status", Southbound)
	require.Error(t, err, text)
	assert.Contains(t, err.Error(), `"cluster/status" is not a valid command`)
	obs, err := read(New(Config{SBCtl: m.Ctl(Southbound), DBDir: m.DBDir}), 2*time.Second)
	require.NoError(t, err)
	o := obs[Southbound]
	assert.Equal(t, report.StatusHealthy, o.Status, o.Message)
	assert.Equal(t, ReasonStandalone, o.Reason)
	assert.Equal(t, 1.0, o.Attributes[report.AttrRaftServers])
	assert.Contains(t, o.Message, "status: ok")

	// Stopped, it is a member not running like any other.
	require.NoError(t, m.SB.Stop(syscall.SIGTERM))
	obs, err = read(New(Config{SBCtl: m.Ctl(Southbound), DBDir: m.DBDir}), 2*time.Second)
	require.NoError(t, err)
	assert.Equal(t, report.StatusDown, obs[Southbound].Status)
	assert.Equal(t, ReasonMemberNotRunning, obs[Southbound].Reason)
}

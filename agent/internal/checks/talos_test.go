package checks_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/cozystack/cozy-health/agent/internal/checkkit"
	"github.com/cozystack/cozy-health/agent/internal/checks/etcdalarms"
	"github.com/cozystack/cozy-health/agent/internal/checks/etcdmember"
	"github.com/cozystack/cozy-health/agent/internal/checks/etcdmembership"
	"github.com/cozystack/cozy-health/agent/internal/checks/fsynclatency"
	"github.com/cozystack/cozy-health/agent/internal/checks/talosservices"
	"github.com/cozystack/cozy-health/agent/internal/runner"
	"github.com/cozystack/cozy-health/agent/internal/sources/etcdmetrics"
	"github.com/cozystack/cozy-health/agent/internal/sources/machineapi"
	"github.com/cozystack/cozy-health/agent/internal/sources/noderole"
	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/talos"
	"github.com/cozystack/cozy-health/test/harness"
	"github.com/cozystack/cozy-health/test/sources/kubeapi"
	"github.com/cozystack/cozy-health/test/sources/machined"
)

// talosNode is one simulated control-plane node: a Talos shim serving its
// real etcd member, and the agent's Talos client pointed at it.
type talosNode struct {
	shim   *machined.Server
	client *talos.Client
	config string
	addr   string
}

func startTalosNodes(t *testing.T, cluster *harness.EtcdCluster, pki *machined.PKI) []*talosNode {
	t.Helper()
	var nodes []*talosNode
	for i, m := range cluster.Members {
		srv, err := machined.New(machined.Config{Hostname: m.Name, EtcdEndpoint: m.ClientURL, TLS: pki.ServerTLS()})
		require.NoError(t, err)
		addr, err := srv.Listen("127.0.0.1:0")
		require.NoError(t, err)
		t.Cleanup(srv.Stop)
		cfgPath := filepath.Join(t.TempDir(), "talosconfig")
		require.NoError(t, pki.WriteTalosconfig(cfgPath, []string{addr}))
		c, err := talos.New(talos.Config{ConfigFile: cfgPath}, zaptest.NewLogger(t).Named(m.Name))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		nodes = append(nodes, &talosNode{shim: srv, client: c, config: cfgPath, addr: addr})
		_ = i
	}
	return nodes
}

func runCheck(t *testing.T, c checkkit.Check) ([]report.Observation, error) {
	t.Helper()
	// The agent's default check deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return c.Run(ctx)
}

func thresholds() etcdmember.Thresholds {
	return etcdmember.Thresholds{QuotaBytes: 2 << 30, DegradedRatio: 0.8}
}

// TestTalosChecksAgainstRealEtcd drives the four Talos checks through the
// real machinery client, TLS and the MachineService, answered from a real
// 3-member etcd cluster; stopping members must show.
func TestTalosChecksAgainstRealEtcd(t *testing.T) {
	cluster := harness.StartEtcdClusterT(t, 3)
	pki, err := machined.NewPKI([]string{"127.0.0.1"}, []string{"os:reader"}, time.Hour)
	require.NoError(t, err)
	nodes := startTalosNodes(t, cluster, pki)

	// All healthy: every member Healthy, exactly one leader, 3 voters.
	leaders := 0
	for i, n := range nodes {
		obs, err := runCheck(t, etcdmember.New(n.client, nil, thresholds()))
		require.NoError(t, err, "node %d", i)
		require.Len(t, obs, 1)
		assert.Equal(t, report.StatusHealthy, obs[0].Status, "node %d: %s %s", i, obs[0].Reason, obs[0].Message)
		assert.NotZero(t, obs[0].Attributes[report.AttrMemberID])
		assert.Positive(t, obs[0].Attributes[report.AttrDBSizeBytes])
		assert.Equal(t, 0.0, obs[0].Attributes[report.AttrIsLearner])
		leaders += int(obs[0].Attributes[report.AttrIsLeader])
	}
	assert.Equal(t, 1, leaders, "exactly one member is the leader")

	obs, err := runCheck(t, etcdmembership.New(nodes[0].client))
	require.NoError(t, err)
	require.Len(t, obs, 1)
	assert.Equal(t, 3.0, obs[0].Attributes[report.AttrVotingMembers])
	assert.Equal(t, 0.0, obs[0].Attributes[report.AttrLearnerMembers])
	assert.Contains(t, obs[0].Message, "etcd-1")

	obs, err = runCheck(t, etcdalarms.New(nodes[0].client))
	require.NoError(t, err)
	assert.Equal(t, report.StatusHealthy, obs[0].Status)
	assert.Equal(t, "NoAlarms", obs[0].Reason)

	obs, err = runCheck(t, talosservices.New(nodes[0].client))
	require.NoError(t, err)
	assert.Equal(t, report.StatusHealthy, obs[0].Status, obs[0].Message)

	// Stop member 1: its node sees its etcd service fail; the others still
	// have quorum and stay Healthy.
	require.NoError(t, cluster.StopMember(1))
	// Answers are shared for up to a second between the checks of one interval.
	require.Eventually(t, func() bool {
		obs, err := runCheck(t, etcdmember.New(nodes[1].client, nil, thresholds()))
		return err == nil && obs[0].Status == report.StatusDown && obs[0].Reason == "EtcdServiceNotRunning"
	}, 20*time.Second, 200*time.Millisecond, "node 1 sees its member stopped")
	// The etcd fault is etcd's (above), not the node's: kubelet and cri run.
	obs, err = runCheck(t, talosservices.New(nodes[1].client))
	require.NoError(t, err)
	assert.Equal(t, report.StatusHealthy, obs[0].Status, obs[0].Message)
	assert.NotContains(t, obs[0].Message, "etcd")
	require.Eventually(t, func() bool {
		obs, err := runCheck(t, etcdmember.New(nodes[0].client, nil, thresholds()))
		return err == nil && obs[0].Status == report.StatusHealthy
	}, 30*time.Second, 200*time.Millisecond, "node 0 keeps quorum with 2 of 3")

	// Stop member 2 too: node 0's member is alone, loses its leader.
	require.NoError(t, cluster.StopMember(2))
	require.Eventually(t, func() bool {
		obs, err := runCheck(t, etcdmember.New(nodes[0].client, nil, thresholds()))
		if err != nil {
			return false
		}
		return obs[0].Status == report.StatusDown && (obs[0].Reason == "NoLeader" || obs[0].Reason == "EtcdServiceUnhealthy")
	}, 30*time.Second, 200*time.Millisecond, "node 0 without quorum is Down")
	// The member list needs a leader: the query fails, which the runner turns into Unknown.
	_, err = runCheck(t, etcdmembership.New(nodes[0].client))
	require.Error(t, err)

	// Bring both back: Healthy again.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, cluster.StartMember(ctx, 1))
	require.NoError(t, cluster.StartMember(ctx, 2))
	require.Eventually(t, func() bool {
		obs, err := runCheck(t, etcdmember.New(nodes[2].client, nil, thresholds()))
		return err == nil && obs[0].Status == report.StatusHealthy
	}, 30*time.Second, 200*time.Millisecond)
}

// TestTalosconfigReload: the client follows its talosconfig file. A
// certificate without a role is refused by the shim's machined-like
// authorization; rewriting the file with an os:reader certificate makes the
// next call succeed without restarting anything.
func TestTalosconfigReload(t *testing.T) {
	cluster := harness.StartEtcdClusterT(t, 1)
	pki, err := machined.NewPKI([]string{"127.0.0.1"}, []string{"os:reader"}, time.Hour)
	require.NoError(t, err)
	nodes := startTalosNodes(t, cluster, pki)
	n := nodes[0]

	crt, key, err := pki.IssueClient([]string{"os:nothing"}, time.Hour)
	require.NoError(t, err)
	b, err := pki.Talosconfig([]string{n.addr}, crt, key)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(n.config, b, 0o600))
	_, err = runCheck(t, talosservices.New(n.client))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "PermissionDenied")

	crt, key, err = pki.IssueClient([]string{"os:reader"}, time.Hour)
	require.NoError(t, err)
	b, err = pki.Talosconfig([]string{n.addr}, crt, key)
	require.NoError(t, err)
	// Same size files could share an mtime granule; the content hash decides.
	require.NoError(t, os.WriteFile(n.config, b, 0o600))
	obs, err := runCheck(t, talosservices.New(n.client))
	require.NoError(t, err)
	assert.Equal(t, report.StatusHealthy, obs[0].Status)

	// The talosconfig gone (its Secret unmounted): talos-services, which
	// every node runs, reads Unknown and says what to mount; the etcd checks,
	// with no way to tell a control-plane node from a worker, read Unknown
	// naming the missing access (never "not applicable": that would make
	// draining this node safe without evidence).
	require.NoError(t, os.Remove(n.config))
	_, err = runCheck(t, etcdmember.New(n.client, nil, thresholds()))
	var ie *checkkit.InputError
	require.ErrorAs(t, err, &ie)
	assert.Equal(t, machineapi.ReasonTalosAPIAccessMissing, ie.Reason)
	assert.Contains(t, ie.Message, "no talosconfig at "+n.config)
	_, err = runCheck(t, talosservices.New(n.client))
	require.ErrorAs(t, err, &ie)
	assert.Equal(t, report.ReasonInputMissing, ie.Reason)
	assert.Equal(t, "talosconfig "+n.config+" not found: "+machineapi.InputFix, ie.Message)

	// A malformed one is unreadable, not missing.
	require.NoError(t, os.WriteFile(n.config, []byte("context: [\n"), 0o600))
	_, err = runCheck(t, talosservices.New(n.client))
	require.ErrorAs(t, err, &ie)
	assert.Equal(t, report.ReasonInputUnreadable, ie.Reason)
	assert.Contains(t, ie.Message, "talosconfig "+n.config+" unreadable (")
}

// TestTalosWorkerAndHang: a worker (no etcd service) makes the etcd checks
// not applicable; a hanging Talos API yields Unknown/CheckTimeout through the
// runner within the deadline, and the other checks are unaffected.
func TestTalosWorkerAndHang(t *testing.T) {
	pki, err := machined.NewPKI([]string{"127.0.0.1"}, []string{"os:reader"}, time.Hour)
	require.NoError(t, err)
	srv, err := machined.New(machined.Config{Hostname: "worker-1", TLS: pki.ServerTLS()})
	require.NoError(t, err)
	addr, err := srv.Listen("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	cfgPath := filepath.Join(t.TempDir(), "talosconfig")
	require.NoError(t, pki.WriteTalosconfig(cfgPath, []string{addr}))
	c, err := talos.New(talos.Config{ConfigFile: cfgPath}, zaptest.NewLogger(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })

	_, err = runCheck(t, etcdmember.New(c, nil, thresholds()))
	require.ErrorIs(t, err, checkkit.ErrNotApplicable)
	_, err = runCheck(t, etcdmembership.New(c))
	require.ErrorIs(t, err, checkkit.ErrNotApplicable)

	reg := prometheus.NewRegistry()
	r, err := runner.New(runner.Config{NodeName: "worker-1", Interval: 5 * time.Second, CheckDeadline: 500 * time.Millisecond, Concurrency: 4},
		[]checkkit.Check{talosservices.New(c), etcdmember.New(c, nil, thresholds())}, reg, zaptest.NewLogger(t))
	require.NoError(t, err)
	rep := r.Collect(context.Background(), 5*time.Second)
	require.Len(t, rep.Observations, 1, "etcd-member is not applicable on a worker")
	assert.Equal(t, report.StatusHealthy, rep.Observations[0].Status)

	srv.SetHang(true)
	time.Sleep(1100 * time.Millisecond) // past the answers shared within one interval
	start := time.Now()
	rep = r.Collect(context.Background(), 5*time.Second)
	took := time.Since(start)
	assert.Less(t, took, 1500*time.Millisecond, "a hanging Talos API must not hold the report")
	require.Len(t, rep.Observations, 2)
	for _, o := range rep.Observations {
		assert.Equal(t, report.StatusUnknown, o.Status)
		assert.Equal(t, report.ReasonCheckTimeout, o.Reason)
	}
	srv.SetHang(false)
}

// TestTalosChecksOnALearner: a learner is judged on its own status (Healthy,
// isLearner=1) and leaves the member and alarm lists, which etcd does not
// serve to learners, to the voting members (not applicable, not Unknown).
func TestTalosChecksOnALearner(t *testing.T) {
	harness.SkipShort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cluster, err := harness.StartEtcdCluster(ctx, harness.EtcdClusterOptions{Dir: t.TempDir(), Members: 3, Voters: 2})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cluster.Stop() })
	require.True(t, cluster.Members[2].Learner)
	pki, err := machined.NewPKI([]string{"127.0.0.1"}, []string{"os:reader"}, time.Hour)
	require.NoError(t, err)
	nodes := startTalosNodes(t, cluster, pki)

	learner := nodes[2]
	var last string
	defer func() { t.Logf("learner, last seen: %s", last) }()
	require.Eventually(t, func() bool {
		obs, err := runCheck(t, etcdmember.New(learner.client, nil, thresholds()))
		if err != nil {
			last = err.Error()
			return false
		}
		last = obs[0].Reason + ": " + obs[0].Message
		return obs[0].Status == report.StatusHealthy
	}, 30*time.Second, 200*time.Millisecond, "the learner catches up and is Healthy")
	t.Logf("learner: %s", last)
	obs, err := runCheck(t, etcdmember.New(learner.client, nil, thresholds()))
	require.NoError(t, err)
	assert.Equal(t, 1.0, obs[0].Attributes[report.AttrIsLearner])
	assert.Equal(t, "MemberLearner", obs[0].Reason)

	_, err = runCheck(t, etcdmembership.New(learner.client))
	assert.ErrorIs(t, err, checkkit.ErrNotApplicable)
	_, err = runCheck(t, etcdalarms.New(learner.client))
	assert.ErrorIs(t, err, checkkit.ErrNotApplicable)

	// A voter lists the learner.
	obs, err = runCheck(t, etcdmembership.New(nodes[0].client))
	require.NoError(t, err)
	assert.Equal(t, 2.0, obs[0].Attributes[report.AttrVotingMembers])
	assert.Equal(t, 1.0, obs[0].Attributes[report.AttrLearnerMembers])
}

// TestEtcdMemberQuotaFromRealEtcd: the quota is the real member's own
// etcd_server_quota_backend_bytes (here --quota-backend-bytes=16 MiB), not
// the configured 2 GiB; filling the member with real writes past 80 % of it
// makes the member Degraded (DBSizeNearQuota), never Down, and the
// observation says the quota came from etcd.
func TestEtcdMemberQuotaFromRealEtcd(t *testing.T) {
	harness.SkipShort(t)
	const quota = 16 << 20
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cluster, err := harness.StartEtcdCluster(ctx, harness.EtcdClusterOptions{Dir: t.TempDir(), Members: 1,
		ExtraArgs: []string{fmt.Sprintf("--quota-backend-bytes=%d", quota)}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cluster.Stop() })
	pki, err := machined.NewPKI([]string{"127.0.0.1"}, []string{"os:reader"}, time.Hour)
	require.NoError(t, err)
	n := startTalosNodes(t, cluster, pki)[0]
	m := cluster.Members[0]
	c := etcdmember.New(n.client, etcdmetrics.New(m.MetricsURL, 0), thresholds())

	obs, err := runCheck(t, c)
	require.NoError(t, err)
	require.Len(t, obs, 1)
	assert.Equal(t, report.StatusHealthy, obs[0].Status, obs[0].Message)
	assert.Equal(t, float64(quota), obs[0].Attributes[report.AttrDBQuotaBytes], "etcd's own quota, not the configured 2 GiB")
	assert.Equal(t, 1.0, obs[0].Attributes[report.AttrDBQuotaFromEtcd])
	assert.Contains(t, obs[0].Message, "etcd_server_quota_backend_bytes")

	size, err := harness.EtcdFill(ctx, []string{m.ClientURL}, quota*85/100)
	require.NoError(t, err)
	t.Logf("filled the member to %d bytes (%.0f%% of %d)", size, 100*float64(size)/quota, quota)
	obs, err = runCheck(t, c)
	require.NoError(t, err)
	assert.Equal(t, report.StatusDegraded, obs[0].Status, obs[0].Message)
	assert.Equal(t, "DBSizeNearQuota", obs[0].Reason)
	assert.Contains(t, obs[0].Message, "etcd_server_quota_backend_bytes")
	// What etcd itself says: no alarm, writes still accepted.
	obs, err = runCheck(t, etcdalarms.New(n.client))
	require.NoError(t, err)
	assert.Equal(t, "NoAlarms", obs[0].Reason)

	// The same facts with etcd's metrics unreadable: the configured quota,
	// said so.
	obs, err = runCheck(t, etcdmember.New(n.client, etcdmetrics.New("http://127.0.0.1:1/metrics", 0), thresholds()))
	require.NoError(t, err)
	assert.Equal(t, report.StatusHealthy, obs[0].Status, "13.6 MiB of the configured 2 GiB")
	assert.Equal(t, float64(2<<30), obs[0].Attributes[report.AttrDBQuotaBytes])
	assert.Equal(t, 0.0, obs[0].Attributes[report.AttrDBQuotaFromEtcd])
	assert.Contains(t, obs[0].Message, "configured --etcd-db-quota-bytes")

	sizes, err := harness.EtcdShrink(ctx, []string{m.ClientURL})
	require.NoError(t, err)
	t.Logf("after delete, compaction and defragmentation: %v bytes", sizes)
	obs, err = runCheck(t, c)
	require.NoError(t, err)
	assert.Equal(t, report.StatusHealthy, obs[0].Status, obs[0].Message)
}

// TestEtcdChecksWithoutTalosAccess: without usable Talos access (no
// talosconfig, a broken one, a certificate Talos refuses) the etcd checks
// are not applicable only on a node its Node object says is not a
// control-plane node; on a control-plane node, or one whose role cannot be
// read, they read Unknown (TalosAPIAccessMissing) naming what is missing.
func TestEtcdChecksWithoutTalosAccess(t *testing.T) {
	dir := t.TempDir()
	api, err := kubeapi.Start(dir)
	require.NoError(t, err)
	t.Cleanup(api.Close)
	api.SetNode("cp-1", map[string]string{noderole.ControlPlaneLabel: ""})
	api.SetNode("worker-1", map[string]string{"node-role.kubernetes.io/worker": ""})
	tok := filepath.Join(dir, "token")
	require.NoError(t, kubeapi.WriteToken(tok))
	roles := func(node string) *noderole.Reader {
		r, err := noderole.New(noderole.Config{Server: api.URL, TokenFile: tok, CAFile: api.CAFile, NodeName: node})
		require.NoError(t, err)
		return r
	}
	etcdChecks := func(c *talos.Client, r *noderole.Reader) []checkkit.Check {
		return []checkkit.Check{
			etcdmember.New(c, nil, thresholds()).WithRoles(r),
			etcdmembership.New(c).WithRoles(r),
			etcdalarms.New(c).WithRoles(r),
			// Nothing answers at the metrics URL either (port 1).
			fsynclatency.New(etcdmetrics.New("http://127.0.0.1:1/metrics", 0), c, fsynclatency.Thresholds{
				WALFsyncDegraded: time.Second, WALFsyncDown: time.Second, BackendCommitDegraded: time.Second, BackendCommitDown: time.Second}).WithRoles(r),
		}
	}
	missing := filepath.Join(dir, "talos.dev", "config")
	noConfig, err := talos.New(talos.Config{ConfigFile: missing}, zaptest.NewLogger(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = noConfig.Close() })

	unknown := func(t *testing.T, c checkkit.Check, want ...string) {
		t.Helper()
		_, err := runCheck(t, c)
		var ie *checkkit.InputError
		require.ErrorAs(t, err, &ie, "%s: %v", c.Name(), err)
		assert.Equal(t, machineapi.ReasonTalosAPIAccessMissing, ie.Reason, c.Name())
		assert.Contains(t, ie.Message, "talos/manifests/talos-api-access-patch.yaml", c.Name())
		for _, w := range want {
			assert.Contains(t, ie.Message, w, c.Name())
		}
		assert.LessOrEqual(t, len(ie.Message), 512, c.Name())
	}
	t.Run("no talosconfig on a control-plane node: Unknown", func(t *testing.T) {
		for _, c := range etcdChecks(noConfig, roles("cp-1")) {
			unknown(t, c, "no talosconfig at "+missing, "control-plane node")
		}
	})
	t.Run("no talosconfig on a worker: not applicable", func(t *testing.T) {
		for _, c := range etcdChecks(noConfig, roles("worker-1")) {
			_, err := runCheck(t, c)
			require.ErrorIs(t, err, checkkit.ErrNotApplicable, c.Name())
			assert.ErrorContains(t, err, "not a control-plane node")
		}
	})
	t.Run("no talosconfig and the role unreadable: Unknown", func(t *testing.T) {
		for _, r := range []*noderole.Reader{nil, roles("not-a-node")} {
			for _, c := range etcdChecks(noConfig, r) {
				unknown(t, c, "no talosconfig at "+missing, "whether this node runs an etcd member is unknown")
			}
		}
	})
	t.Run("a broken talosconfig on a control-plane node: Unknown", func(t *testing.T) {
		require.NoError(t, os.MkdirAll(filepath.Dir(missing), 0o700))
		require.NoError(t, os.WriteFile(missing, []byte("context: [\n"), 0o600))
		defer os.Remove(missing)
		unknown(t, etcdmember.New(noConfig, nil, thresholds()).WithRoles(roles("cp-1")), "talosconfig "+missing+" unusable")
	})
	t.Run("Talos refuses the certificate on a control-plane node: Unknown", func(t *testing.T) {
		pki, err := machined.NewPKI([]string{"127.0.0.1"}, []string{"os:reader"}, time.Hour)
		require.NoError(t, err)
		srv, err := machined.New(machined.Config{Hostname: "cp-1", TLS: pki.ServerTLS()})
		require.NoError(t, err)
		addr, err := srv.Listen("127.0.0.1:0")
		require.NoError(t, err)
		t.Cleanup(srv.Stop)
		crt, key, err := pki.IssueClient([]string{"os:nothing"}, time.Hour)
		require.NoError(t, err)
		b, err := pki.Talosconfig([]string{addr}, crt, key)
		require.NoError(t, err)
		cfg := filepath.Join(t.TempDir(), "talosconfig")
		require.NoError(t, os.WriteFile(cfg, b, 0o600))
		c, err := talos.New(talos.Config{ConfigFile: cfg}, zaptest.NewLogger(t))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		unknown(t, etcdmember.New(c, nil, thresholds()).WithRoles(roles("cp-1")), "the Talos API refuses the agent's credentials")
		_, err = runCheck(t, etcdmember.New(c, nil, thresholds()).WithRoles(roles("worker-1")))
		require.ErrorIs(t, err, checkkit.ErrNotApplicable)
	})
	t.Run("Talos checks disabled: Unknown only on a known control-plane node", func(t *testing.T) {
		_, err := runCheck(t, etcdmember.New(nil, nil, thresholds()).WithRoles(roles("cp-1")))
		var ie *checkkit.InputError
		require.ErrorAs(t, err, &ie)
		assert.Contains(t, ie.Message, "--talosconfig empty")
		_, err = runCheck(t, etcdmember.New(nil, nil, thresholds()).WithRoles(roles("worker-1")))
		require.ErrorIs(t, err, checkkit.ErrNotApplicable)
		_, err = runCheck(t, etcdmember.New(nil, nil, thresholds()))
		require.ErrorIs(t, err, checkkit.ErrNotApplicable)
	})
	t.Run("through the runner: an etcd-member observation, Unknown, pinned to the node", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		r, err := runner.New(runner.Config{NodeName: "cp-1", Interval: 5 * time.Second, CheckDeadline: time.Second, Concurrency: 4},
			etcdChecks(noConfig, roles("cp-1"))[:1], reg, zaptest.NewLogger(t))
		require.NoError(t, err)
		rep := r.Collect(context.Background(), 5*time.Second)
		require.Len(t, rep.Observations, 1)
		o := rep.Observations[0]
		assert.Equal(t, report.CheckEtcdMember, o.Check)
		assert.Equal(t, report.StatusUnknown, o.Status)
		assert.Equal(t, machineapi.ReasonTalosAPIAccessMissing, o.Reason)
		t.Logf("%s %s: %s", o.Status, o.Reason, o.Message)
	})
}

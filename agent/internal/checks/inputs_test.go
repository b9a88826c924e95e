package checks_test

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/cozystack/cozy-health/agent/internal/checkkit"
	"github.com/cozystack/cozy-health/agent/internal/checks"
	"github.com/cozystack/cozy-health/agent/internal/checks/ciliumagent"
	"github.com/cozystack/cozy-health/agent/internal/runner"
	"github.com/cozystack/cozy-health/agent/internal/sources/machineapi"
	"github.com/cozystack/cozy-health/pkg/metrictest"
	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/test/harness"
	ciliumsrc "github.com/cozystack/cozy-health/test/sources/cilium"
	"github.com/cozystack/cozy-health/test/sources/machined"
	"github.com/cozystack/cozy-health/test/volume"
)

// TestMissingInputsRecoverWithoutRestart: one agent's checks, built once,
// on a node where the Talos ServiceAccount Secret and the Cilium socket are
// not there yet. Those checks read Unknown with what to mount while the
// rest report; when the kubelet later writes the Secret volume (its atomic
// layout) and Cilium starts, the very same checks recover on their next
// run. (The LINSTOR client certificate is no agent input: the aggregator
// reads it from its Secret, see aggregator/internal/linstorview.)
func TestMissingInputsRecoverWithoutRestart(t *testing.T) {
	cluster := harness.StartEtcdClusterT(t, 1)
	talosPKI, err := machined.NewPKI([]string{"127.0.0.1"}, []string{"os:reader"}, time.Hour)
	require.NoError(t, err)
	srv, err := machined.New(machined.Config{Hostname: "node-0", EtcdEndpoint: cluster.Members[0].ClientURL, TLS: talosPKI.ServerTLS()})
	require.NoError(t, err)
	talosAddr, err := srv.Listen("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(srv.Stop)

	dir := t.TempDir()
	sockDir, err := os.MkdirTemp("", "cil")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(sockDir) })
	talosDir := filepath.Join(dir, "talos.dev")
	probe := filepath.Join(dir, "probe")
	require.NoError(t, os.Mkdir(probe, 0o700))

	talosconfig, ciliumSocket := filepath.Join(talosDir, "config"), filepath.Join(sockDir, "cilium.sock")
	cfg := checks.NewConfig()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	require.NoError(t, fs.Parse([]string{
		"--talosconfig", talosconfig, "--etcd-metrics-url", cluster.Members[0].MetricsURL, "--fsync-probe-dir", probe,
		"--proc-root=", "--drbdsetup=", "--cilium-socket", ciliumSocket,
		"--fsync-probe-p99-degraded=30s", "--fsync-probe-p99-down=1m",
	}))
	require.NoError(t, cfg.Validate())

	set, err := cfg.Build("node-0", zaptest.NewLogger(t))
	require.NoError(t, err, "a missing optional input never stops the agent")
	t.Cleanup(func() { _ = set.Close() })
	reg := prometheus.NewRegistry()
	r, err := runner.New(runner.Config{NodeName: "node-0", Interval: 5 * time.Second, CheckDeadline: 2 * time.Second, Concurrency: 4}, set.Checks, reg, zaptest.NewLogger(t))
	require.NoError(t, err)
	collect := func() map[string]report.Observation {
		out := map[string]report.Observation{}
		for _, o := range r.Collect(context.Background(), 5*time.Second).Observations {
			out[o.Check] = o
		}
		return out
	}

	obs := collect()
	for c, want := range map[string]string{
		report.CheckTalosServices: "talosconfig " + talosconfig + " not found: mount Secret cozy-health-agent-talos-secrets",
		report.CheckCiliumAgent:   "Cilium agent socket " + ciliumSocket + " not found: mount hostPath /var/run/cilium",
	} {
		o, ok := obs[c]
		require.True(t, ok, "%s is reported, not left out: %v", c, obs)
		assert.Equal(t, report.StatusUnknown, o.Status, c)
		assert.Equal(t, report.ReasonInputMissing, o.Reason, c)
		assert.True(t, strings.HasPrefix(o.Message, want), "%s: %q", c, o.Message)
	}
	// Without the talosconfig, and no Node to read the role from, whether
	// this node runs an etcd member is unknown: Unknown naming the patch,
	// never left out (draining it would read safe on no evidence).
	for _, c := range []string{report.CheckEtcdMember, report.CheckEtcdMembership, report.CheckEtcdAlarms} {
		o, ok := obs[c]
		require.True(t, ok, "%s is reported, not left out", c)
		assert.Equal(t, report.StatusUnknown, o.Status, c)
		assert.Equal(t, machineapi.ReasonTalosAPIAccessMissing, o.Reason, c)
		assert.True(t, strings.HasPrefix(o.Message, "no talosconfig at "+talosconfig+": apply talos/manifests/talos-api-access-patch.yaml"), "%s: %q", c, o.Message)
	}
	for _, c := range []string{report.CheckFsyncLatency, report.CheckFsyncProbe} {
		assert.Equal(t, report.StatusHealthy, obs[c].Status, "%s keeps reporting: %+v", c, obs[c])
	}
	assert.Equal(t, 1.0, errorsTotal(t, reg, report.CheckCiliumAgent, report.ReasonInputMissing))

	// The kubelet mounts the Secrets (they were created meanwhile) and the
	// Cilium agent comes up.
	talosconfigPEM, err := talosPKI.Talosconfig([]string{talosAddr}, talosPKI.ClientCertPEM, talosPKI.ClientKeyPEM)
	require.NoError(t, err)
	require.NoError(t, volume.Write(talosDir, map[string][]byte{"config": talosconfigPEM}))
	cil, err := ciliumsrc.Start(ciliumSocket)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cil.Close() })

	obs = collect()
	for _, c := range []string{report.CheckTalosServices, report.CheckEtcdMember, report.CheckEtcdMembership, report.CheckEtcdAlarms,
		report.CheckCiliumAgent} {
		assert.Equal(t, report.StatusHealthy, obs[c].Status, "%s recovered without a restart: %+v", c, obs[c])
	}
	assert.NotContains(t, obs, report.CheckDRBDResource, "no drbdsetup here: the aggregator reads DRBD from LINSTOR")
}

// errorsTotal reads cozy_health_agent_check_errors_total{check, reason}.
func errorsTotal(t *testing.T, reg *prometheus.Registry, check, reason string) float64 {
	t.Helper()
	m := metrictest.Lookup(t, reg, "cozy_health_agent_check_errors_total", "check", check, "reason", reason)
	require.NotNil(t, m, "no cozy_health_agent_check_errors_total{check=%q,reason=%q}", check, reason)
	return m.GetCounter().GetValue()
}

// The messages end up in a Health node entry ("<Type>: <message>", 256
// bytes at most): with the chart's paths the whole fix stays readable.
func TestInputMessagesFitAHealthEntry(t *testing.T) {
	for _, m := range []struct{ what, path, fix string }{
		{"talosconfig", machineapi.DefaultConfigFile, machineapi.InputFix},
		{"Cilium agent socket", "/var/run/cilium/cilium.sock", ciliumagent.InputFix},
	} {
		err := checkkit.Input(m.what, m.path, m.fix, os.ErrNotExist)
		entry := "TalosServices: " + err.Error()
		assert.LessOrEqual(t, len(entry), 256, entry)
	}
}

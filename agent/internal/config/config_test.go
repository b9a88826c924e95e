package config

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/agent/internal/checkkit"
	"github.com/cozystack/cozy-health/agent/internal/sources/machineapi"
)

func parse(t *testing.T, args ...string) (Config, error) {
	t.Helper()
	c := Default()
	c.NodeName = ""
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	return c, c.Validate()
}

func TestDefaultsAreValid(t *testing.T) {
	c, err := parse(t, "--node-name", "n1")
	require.NoError(t, err)
	assert.Equal(t, 5*time.Second, c.Interval)
	assert.Equal(t, 2*time.Second, c.CheckDeadline)
	assert.Equal(t, machineapi.DefaultConfigFile, c.Checks.Sources.Talos.ConfigFile)
	assert.Equal(t, DefaultTokenFile, c.Uplink.TokenFile)
	assert.Equal(t, "http://127.0.0.1:2381/metrics", c.Checks.Sources.EtcdMetricsURL)
	// The footprint the agent bench measures: one P, collections at +100%.
	assert.Equal(t, 1, c.MaxProcs)
	assert.Equal(t, 100, c.GCPercent)
}

func TestNodeNameFromEnv(t *testing.T) {
	t.Setenv("NODE_NAME", "from-env")
	assert.Equal(t, "from-env", Default().NodeName)
}

func TestAggregatorList(t *testing.T) {
	c, err := parse(t, "--node-name", "n", "--aggregator", "a:1,b:2", "--aggregator", "c:3", "--talos-endpoints", "10.0.0.1")
	require.NoError(t, err)
	assert.Equal(t, []string{"a:1", "b:2", "c:3"}, c.Uplink.Aggregators)
	assert.Equal(t, checkkit.ListFlag{"10.0.0.1"}, c.Checks.Sources.Talos.Endpoints)
}

func TestValidateRejects(t *testing.T) {
	for name, args := range map[string][]string{
		"no node":               {},
		"deadline >= interval":  {"--node-name", "n", "--check-deadline", "5s"},
		"tiny interval":         {"--node-name", "n", "--interval", "100ms", "--check-deadline", "50ms"},
		"bad output":            {"--node-name", "n", "--output", "yaml"},
		"bad url":               {"--node-name", "n", "--etcd-metrics-url", "ftp://x/metrics"},
		"url without host":      {"--node-name", "n", "--kube-api-server", "http://"},
		"bad regexp":            {"--node-name", "n", "--diskstats-devices", "("},
		"down < degraded":       {"--node-name", "n", "--etcd-wal-fsync-p99-degraded", "2s", "--etcd-wal-fsync-p99-down", "1s"},
		"ratio > 1":             {"--node-name", "n", "--etcd-db-degraded-ratio", "1.5"},
		"loss > 1":              {"--node-name", "n", "--kube-ovn-ping-loss-down", "2"},
		"zero concurrency":      {"--node-name", "n", "--concurrency", "0"},
		"window < samples":      {"--node-name", "n", "--fsync-probe-samples", "5", "--fsync-probe-window", "2"},
		"pprof without metrics": {"--node-name", "n", "--pprof", "--metrics-addr", ""},
		"negative gomaxprocs":   {"--node-name", "n", "--gomaxprocs", "-1"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := parse(t, args...)
			require.Error(t, err)
		})
	}
}

// TestChartArgsAreFlags: every --flag the chart passes the agent is one the
// agent registers (each check registers its own: a renamed or dropped one
// would stop the DaemonSet's pods at start-up).
func TestChartArgsAreFlags(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "deploy", "charts", "cozy-health", "templates", "agent-daemonset.yaml"))
	require.NoError(t, err)
	args := regexp.MustCompile(`(?m)^\s*- --([a-z0-9-]+)`).FindAllStringSubmatch(string(raw), -1)
	require.NotEmpty(t, args)
	c := Default()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	c.RegisterFlags(fs)
	for _, a := range args {
		assert.NotNil(t, fs.Lookup(a[1]), "the chart passes --%s", a[1])
	}
}

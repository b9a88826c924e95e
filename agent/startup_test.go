package main

import (
	"net"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/pkg/cli/clitest"
)

// TestStartupExitCodes: the agent reads its configuration the way the
// aggregator does (flags, the --config file by flag names, Validate) and
// ends with the same codes: 2 for anything wrong with the command line or
// the file, 1 when running fails, 0 for --help.
func TestStartupExitCodes(t *testing.T) {
	dir := t.TempDir()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	// Every source off but the fsync probe: run-once needs nothing else.
	quiet := []string{"--talosconfig", "", "--etcd-metrics-url", "", "--cilium-socket", "", "--cilium-health-socket", "", "--ovs-db-socket", "", "--ovn-nb-ctl", "", "--ovn-sb-ctl", "",
		"--fsync-probe-dir", dir, "--proc-root", "", "--drbdsetup", ""}
	missing := filepath.Join(dir, "missing.yaml")

	clitest.Run(t, run, []clitest.Case{
		{Name: "help", Args: []string{"run", "-h"}, Code: 0, Say: "-node-name"},
		{Name: "help lists the runtime flags shared with the aggregator", Args: []string{"run", "-h"}, Code: 0, Say: "the agent after its first report, the aggregator after its warm-up"},
		{Name: "unknown flag", Args: []string{"run", "--frobnicate"}, Code: 2, Say: "frobnicate"},
		{Name: "unknown command", Args: []string{"frobnicate"}, Code: 2, Say: `unknown command "frobnicate"`},
		{Name: "missing config file", Args: []string{"run-once", "--config", missing}, Code: 2, Say: missing},
		{Name: "unknown config key", Args: []string{"run-once", "--config", clitest.File(t, "node-name: n1\nintervall: 5s\n")}, Code: 2, Say: `unknown key "intervall"`},
		{Name: "invalid value", Args: []string{"run-once", "--node-name", "n1", "--log-level", "loud"}, Code: 2, Say: "--log-level"},
		{Name: "invalid value in the file", Args: []string{"run-once", "--config", clitest.File(t, "node-name: n1\ninterval: 10ms\n")}, Code: 2, Say: "--interval"},
		{Name: "file then flags", Args: append([]string{"run-once", "--config", clitest.File(t, "node-name: from-file\noutput: json\n"), "--output", "text"}, quiet...), Code: 0,
			Check: func(t *testing.T, stdout string) {
				assert.Contains(t, stdout, "COMPONENT", "--output text on the command line wins over the file's json")
			}},
		{Name: "running fails", Args: append([]string{"run", "--node-name", "n1", "--metrics-addr", taken.Addr().String()}, quiet...), Code: 1, Say: "listen for metrics"},
	})
}

package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStartupExitCodes: the agent reads its configuration the way the
// aggregator does (flags, the --config file by flag names, Validate) and
// ends with the same codes: 2 for anything wrong with the command line or
// the file, 1 when running fails, 0 for --help.
func TestStartupExitCodes(t *testing.T) {
	dir := t.TempDir()
	file := func(body string) string {
		p := filepath.Join(t.TempDir(), "agent.yaml")
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	// Every source off but the fsync probe: run-once needs nothing else.
	quiet := []string{"--talosconfig", "", "--etcd-metrics-url", "", "--cilium-socket", "", "--cilium-health-socket", "",
		"--ovs-db-socket", "", "--ovn-nb-ctl", "", "--ovn-sb-ctl", "", "--fsync-probe-dir", dir, "--proc-root", "", "--drbdsetup", ""}
	missing := filepath.Join(dir, "missing.yaml")

	for _, tc := range []struct {
		name string
		args []string
		code int
		say  string
	}{
		{"help", []string{"run", "-h"}, 0, "-node-name"},
		{"unknown flag", []string{"run", "--frobnicate"}, 2, "frobnicate"},
		{"unknown command", []string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{"missing config file", []string{"run-once", "--config", missing}, 2, missing},
		{"unknown config key", []string{"run-once", "--config", file("node-name: n1\nintervall: 5s\n")}, 2, `unknown key "intervall"`},
		{"invalid value", []string{"run-once", "--node-name", "n1", "--log-level", "loud"}, 2, "--log-level"},
		{"invalid value in the file", []string{"run-once", "--config", file("node-name: n1\ninterval: 10ms\n")}, 2, "--interval"},
		{"file then flags", append([]string{"run-once", "--config", file("node-name: from-file\noutput: json\n"), "--output", "text"}, quiet...), 0, ""},
		{"running fails", append([]string{"run", "--node-name", "n1", "--metrics-addr", taken.Addr().String()}, quiet...), 1, "listen for metrics"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tc.args, &stdout, &stderr)
			assert.Equal(t, tc.code, code, "stderr: %s", stderr.String())
			assert.Contains(t, stderr.String(), tc.say)
			if tc.name == "file then flags" {
				assert.Contains(t, stdout.String(), "COMPONENT", "--output text on the command line wins over the file's json")
			}
		})
	}
}

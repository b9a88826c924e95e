package main

import (
	"io"
	"path/filepath"
	"testing"

	"github.com/cozystack/cozy-health/pkg/cli/clitest"
)

// TestStartupExitCodes: the aggregator reads its configuration the way the
// agent does (flags, the --config file by flag names, Validate) and ends
// with the same codes: 2 for anything wrong with the command line or the
// file, 1 when running fails, 0 for --help.
func TestStartupExitCodes(t *testing.T) {
	dir := t.TempDir()
	base := []string{"--tls-cert", "/c.pem", "--tls-key", "/k.pem", "--identity", "me"}
	missing := filepath.Join(dir, "missing.yaml")
	noKubeconfig := filepath.Join(dir, "no-kubeconfig")
	with := func(args ...string) []string { return append(args, base...) }

	clitest.Run(t, func(args []string, _, stderr io.Writer) int { return run(args, stderr) }, []clitest.Case{
		{Name: "help", Args: []string{"-h"}, Code: 0, Say: "-drain-auth"},
		{Name: "help lists the runtime flags shared with the agent", Args: []string{"-h"}, Code: 0, Say: "the agent after its first report, the aggregator after its warm-up"},
		{Name: "unknown flag", Args: []string{"--frobnicate"}, Code: 2, Say: "frobnicate"},
		{Name: "stray argument", Args: with("serve"), Code: 2, Say: "unexpected arguments: serve"},
		{Name: "missing config file", Args: with("--config", missing), Code: 2, Say: missing},
		{Name: "unknown config key", Args: with("--config", clitest.File(t, "namespce: x\n")), Code: 2, Say: `unknown key "namespce"`},
		{Name: "invalid value", Args: with("--log-level", "loud"), Code: 2, Say: "--log-level"},
		{Name: "invalid value in the file", Args: with("--config", clitest.File(t, "heartbeat-grace: forever\n")), Code: 2, Say: "--heartbeat-grace"},
		{Name: "running fails", Args: with("--config", clitest.File(t, "kubeconfig: "+noKubeconfig+"\n")), Code: 1, Say: noKubeconfig},
	})
}

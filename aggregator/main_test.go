package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStartupExitCodes: the aggregator reads its configuration the way the
// agent does (flags, the --config file by flag names, Validate) and ends
// with the same codes: 2 for anything wrong with the command line or the
// file, 1 when running fails, 0 for --help.
func TestStartupExitCodes(t *testing.T) {
	dir := t.TempDir()
	file := func(body string) string {
		p := filepath.Join(t.TempDir(), "aggregator.yaml")
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	base := []string{"--tls-cert", "/c.pem", "--tls-key", "/k.pem", "--identity", "me"}
	missing := filepath.Join(dir, "missing.yaml")
	noKubeconfig := filepath.Join(dir, "no-kubeconfig")

	for _, tc := range []struct {
		name string
		args []string
		code int
		say  string
	}{
		{"help", []string{"-h"}, 0, "-drain-auth"},
		{"unknown flag", []string{"--frobnicate"}, 2, "frobnicate"},
		{"stray argument", append([]string{"serve"}, base...), 2, "unexpected arguments: serve"},
		{"missing config file", append([]string{"--config", missing}, base...), 2, missing},
		{"unknown config key", append([]string{"--config", file("namespce: x\n")}, base...), 2, `unknown key "namespce"`},
		{"invalid value", append([]string{"--log-level", "loud"}, base...), 2, "--log-level"},
		{"invalid value in the file", append([]string{"--config", file("heartbeat-grace: forever\n")}, base...), 2, "--heartbeat-grace"},
		{"running fails", append([]string{"--config", file("kubeconfig: " + noKubeconfig + "\n")}, base...), 1, noKubeconfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			code := run(tc.args, &stderr)
			assert.Equal(t, tc.code, code, "stderr: %s", stderr.String())
			assert.Contains(t, stderr.String(), tc.say)
		})
	}
}

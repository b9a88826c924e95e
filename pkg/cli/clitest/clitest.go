// Package clitest checks how a cozy-health binary starts: each Case runs the
// binary's run function with arguments and checks its exit code and what it
// says on stderr.
package clitest

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Case is one start of a binary.
type Case struct {
	Name string
	Args []string
	// Code is the exit code run must return.
	Code int
	// Say is what stderr must contain.
	Say string
	// Check, when set, checks stdout too.
	Check func(t *testing.T, stdout string)
}

// Run runs every case through run (the binary's main without os.Exit).
func Run(t *testing.T, run func(args []string, stdout, stderr io.Writer) int, cases []Case) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tc.Args, &stdout, &stderr)
			assert.Equal(t, tc.Code, code, "stderr: %s", stderr.String())
			assert.Contains(t, stderr.String(), tc.Say)
			if tc.Check != nil {
				tc.Check(t, stdout.String())
			}
		})
	}
}

// File writes body to a fresh YAML file and returns its path.
func File(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

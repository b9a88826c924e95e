package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/test/harness"
)

// TestDemo runs `make demo` as a newcomer does: the built cozy-health-lab
// binary's demo command on a 3-node lab. Every step of the demo waits for
// what it promises and fails naming what it read instead, so the demo
// staying true is part of make test (a silent agent's linstor entry once
// changed meaning and only a hand-run demo showed it).
func TestDemo(t *testing.T) {
	harness.SkipShort(t)
	testbin, err := harness.TestBin.Dir()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir(t), "cozy-health-lab"), "demo", "--nodes", "3", "--dir", t.TempDir())
	cmd.Env = append(os.Environ(), harness.TestBin.Env()+"="+testbin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	t.Log(out.String())
	require.NoError(t, err, "make demo failed; its output is above")
	require.Contains(t, out.String(), "Every step behaved as promised.")
}

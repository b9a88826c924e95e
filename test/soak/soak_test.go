package soak

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/test/harness"
	"github.com/cozystack/cozy-health/test/lab"
)

// shortMinutes is how long the short variant schedules faults; with the
// lab's start (~20 s) and the last fault's repair it stays under 4 minutes
// (docs/soak.md).
const shortMinutes = 2

// TestSoakShort is the short variant of `make soak` in `make test`: a
// 3-node lab under the seeded schedule of the faults marked Short for two
// minutes; no false-green second and every bound met.
func TestSoakShort(t *testing.T) {
	harness.SkipShort(t)
	bin := os.Getenv("COZY_HEALTH_BIN")
	if bin == "" {
		bin = filepath.Join(harness.RepoRoot(), "bin")
	}
	if _, err := os.Stat(filepath.Join(bin, "cozy-health-agent")); err != nil {
		t.Fatalf("the soak runs the real binaries: run `make build` (or make test) first: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	l, err := lab.Up(ctx, lab.Options{Dir: t.TempDir(), Nodes: Nodes, BinDir: bin, Log: t.Logf})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, l.Down()) })

	rep, err := Run(ctx, l.State.Dir, Options{Duration: shortMinutes * time.Minute, Seed: 1, Short: true, Log: t.Logf})
	if rep != nil {
		var b bytes.Buffer
		rep.Print(&b)
		t.Log("\n" + b.String())
	}
	require.NoError(t, err)
	assert.GreaterOrEqual(t, len(rep.Rows), 3, "the short schedule ran at least three faults")
	assert.Empty(t, rep.Failures(), "no false-green second, every bound met (lab logs in %s/logs)", l.State.Dir)
}

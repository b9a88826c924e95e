package diskstats

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/agent/internal/checkkit"
	"github.com/cozystack/cozy-health/pkg/report"
)

func newCheck(root string) *Check {
	return New(Config{ProcRoot: root, Devices: regexp.MustCompile(`^(sd[a-z]+|nvme[0-9]+n[0-9]+)$`), Degraded: 100 * time.Millisecond, Down: time.Second})
}

func find(obs []report.Observation, dev string) *report.Observation {
	for i := range obs {
		if obs[i].ResourceRef.Name == dev {
			return &obs[i]
		}
	}
	return nil
}

// TestFixtureTree reads the procfs fixture (14-, 18- and 20-field rows).
func TestFixtureTree(t *testing.T) {
	c := newCheck("testdata/proc")
	obs, err := c.Run(context.Background())
	require.NoError(t, err)
	sda := find(obs, "sda")
	require.NotNil(t, sda)
	assert.Equal(t, report.KindBlockDevice, sda.ResourceRef.Kind)
	assert.NotContains(t, sda.Attributes, report.AttrFlushLatencySeconds, "a 14-field row has no flush counters")
	sdc := find(obs, "sdc")
	require.NotNil(t, sdc)
	// sdc: 127 flushes in 182 ms.
	assert.InDelta(t, 0.182/127, sdc.Attributes[report.AttrFlushLatencySeconds], 1e-6)
	assert.Nil(t, find(obs, "sda1"), "partitions are not selected")
	assert.Nil(t, find(obs, "loop0"))
}

const line = "   8       0 sda %d 0 0 %d %d 0 0 %d 0 0 0 0 0 0 0 %d %d\n"

func write(t *testing.T, dir string, reads, readMs, writes, writeMs, flushes, flushMs int) {
	t.Helper()
	data := fmtLine(reads, readMs, writes, writeMs, flushes, flushMs)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "diskstats"), []byte(data), 0o644))
}

func fmtLine(reads, readMs, writes, writeMs, flushes, flushMs int) string {
	return fmt.Sprintf(line, reads, readMs, writes, writeMs, flushes, flushMs)
}

// TestDeltaBetweenRuns: the second run judges only what happened between
// the runs; a counter reset falls back to totals.
func TestDeltaBetweenRuns(t *testing.T) {
	dir := t.TempDir()
	c := newCheck(dir)
	write(t, dir, 1000, 1000, 1000, 1000, 100, 100) // 1 ms each
	obs, err := c.Run(context.Background())
	require.NoError(t, err)
	require.Len(t, obs, 1)
	assert.Equal(t, report.StatusHealthy, obs[0].Status)
	assert.InDelta(t, 0.001, obs[0].Attributes[report.AttrWriteLatencySeconds], 1e-9)

	// 10 more writes taking 2 s each (20 s of ticks): Down, although the
	// since-boot average would be ~21 ms.
	write(t, dir, 1000, 1000, 1010, 21000, 100, 100)
	obs, err = c.Run(context.Background())
	require.NoError(t, err)
	assert.Equal(t, report.StatusDown, obs[0].Status, obs[0].Message)
	assert.InDelta(t, 2.0, obs[0].Attributes[report.AttrWriteLatencySeconds], 1e-9)

	// Slow flushes alone: Degraded.
	write(t, dir, 1000, 1000, 1010, 21000, 110, 2100) // 10 flushes, 200 ms each
	obs, err = c.Run(context.Background())
	require.NoError(t, err)
	assert.Equal(t, report.StatusDegraded, obs[0].Status, obs[0].Message)
	assert.InDelta(t, 0.2, obs[0].Attributes[report.AttrFlushLatencySeconds], 1e-9)

	// Device re-created: counters went down; totals are used.
	write(t, dir, 10, 10, 10, 10, 1, 1)
	obs, err = c.Run(context.Background())
	require.NoError(t, err)
	assert.Equal(t, report.StatusHealthy, obs[0].Status)
}

func TestAbsentAndGarbage(t *testing.T) {
	_, err := newCheck("").Run(context.Background())
	require.ErrorIs(t, err, checkkit.ErrNotApplicable)
	_, err = newCheck(t.TempDir()).Run(context.Background())
	require.ErrorIs(t, err, checkkit.ErrNotApplicable)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "diskstats"), []byte("garbage line\n\x00\x01"), 0o644))
	obs, err := newCheck(dir).Run(context.Background())
	// procfs skips lines with too few fields: nothing judged, no error, no panic.
	if err == nil {
		assert.Empty(t, obs)
	}
}

func FuzzRead(f *testing.F) {
	b, err := os.ReadFile("testdata/proc/diskstats")
	require.NoError(f, err)
	f.Add(b)
	f.Add([]byte(fmtLine(1, 1, 1, 1, 1, 1)))
	f.Add([]byte("8 0 sda 1 2 3\n"))
	// One directory per fuzz process; each input overwrites the file.
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(filepath.Join(dir, "diskstats"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		stats, err := Read(dir)
		if err != nil {
			return
		}
		for _, d := range stats {
			l := Delta(d, d)
			if l.Read < 0 || l.Write < 0 || l.Flush < 0 {
				t.Fatalf("negative latency %+v", l)
			}
			_ = Delta(d, stats[0])
		}
	})
}

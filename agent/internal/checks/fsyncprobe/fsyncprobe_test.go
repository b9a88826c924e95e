package fsyncprobe

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/agent/internal/checkkit"
	"github.com/cozystack/cozy-health/pkg/report"
)

func TestProbeOnRealDir(t *testing.T) {
	dir := t.TempDir()
	c := New(Config{Dir: dir, Samples: 3, Window: 5, DegradedP99: time.Second, DownP99: 2 * time.Second})
	for range 3 {
		obs, err := c.Run(context.Background())
		require.NoError(t, err)
		require.Len(t, obs, 1)
		assert.Equal(t, report.StatusHealthy, obs[0].Status, obs[0].Message)
		assert.Positive(t, obs[0].Attributes[report.AttrFsyncP99Seconds])
	}
	st, err := os.Stat(filepath.Join(dir, FileName))
	require.NoError(t, err)
	assert.Equal(t, int64(9*WriteSize), st.Size(), "3 runs x 3 appends")
	c.mu.Lock()
	assert.Len(t, c.window, 5, "the window is bounded")
	c.mu.Unlock()
}

func TestProbeThresholds(t *testing.T) {
	// Any real fdatasync takes more than a nanosecond.
	c := New(Config{Dir: t.TempDir(), Samples: 2, Window: 10, DegradedP99: time.Nanosecond, DownP99: time.Hour})
	obs, err := c.Run(context.Background())
	require.NoError(t, err)
	assert.Equal(t, report.StatusDegraded, obs[0].Status)
	assert.Equal(t, "FsyncSlow", obs[0].Reason)
	c = New(Config{Dir: t.TempDir(), Samples: 2, Window: 10, DegradedP99: time.Nanosecond, DownP99: time.Nanosecond})
	obs, err = c.Run(context.Background())
	require.NoError(t, err)
	assert.Equal(t, report.StatusDown, obs[0].Status)
}

func TestProbeAbsentOrBroken(t *testing.T) {
	_, err := New(Config{Samples: 1, Window: 1}).Run(context.Background())
	require.ErrorIs(t, err, checkkit.ErrNotApplicable)
	_, err = New(Config{Dir: filepath.Join(t.TempDir(), "missing"), Samples: 1, Window: 1}).Run(context.Background())
	require.ErrorIs(t, err, checkkit.ErrNotApplicable)
	f := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(f, nil, 0o600))
	_, err = New(Config{Dir: f, Samples: 1, Window: 1}).Run(context.Background())
	require.ErrorContains(t, err, "not a directory")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = New(Config{Dir: t.TempDir(), Samples: 1, Window: 1}).Run(ctx)
	require.ErrorIs(t, err, context.Canceled)
}

func TestP99(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	assert.Equal(t, 99*time.Millisecond, P99(ds))
	assert.Equal(t, 5*time.Millisecond, P99([]time.Duration{5 * time.Millisecond, time.Millisecond}))
	assert.Equal(t, time.Duration(0), P99(nil))
}

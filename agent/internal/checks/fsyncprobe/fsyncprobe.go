// Package fsyncprobe measures the disk under etcd actively: a few small
// appends, each followed by fdatasync, on a file in a directory on the same
// filesystem as etcd's data, and judges the p99 over a sliding window.
package fsyncprobe

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cozystack/cozy-health/agent/internal/checkkit"
	"github.com/cozystack/cozy-health/pkg/report"
)

// WriteSize is the size of one append: about one etcd WAL entry (the fio
// recipe referenced by etcd uses 2300 bytes).
const WriteSize = 2300

// maxFileSize bounds the probe file; it is truncated when it grows past it.
const maxFileSize = 4 << 20

// FileName is the probe file inside the probe directory.
const FileName = "cozy-health-fsync-probe"

// Config configures the check.
type Config struct {
	Dir                  string
	Samples, Window      int
	DegradedP99, DownP99 time.Duration
}

// Check is the fsync-probe check.
type Check struct {
	cfg Config
	buf []byte

	// mu guards window, the last cfg.Window sync durations (a ring) and next.
	mu     sync.Mutex
	window []time.Duration
	next   int
}

var _ checkkit.Check = (*Check)(nil)

// New returns the check.
func New(cfg Config) *Check {
	buf := make([]byte, WriteSize)
	for i := range buf {
		buf[i] = byte('a' + i%26)
	}
	return &Check{cfg: cfg, buf: buf}
}

// Name implements checkkit.Check.
func (*Check) Name() string { return report.CheckFsyncProbe }

// Component implements checkkit.Check.
func (*Check) Component() string { return report.ComponentDisk }

// Run implements checkkit.Check.
func (c *Check) Run(ctx context.Context) ([]report.Observation, error) {
	if c.cfg.Dir == "" {
		return nil, checkkit.NotApplicable("no fsync probe directory configured")
	}
	st, err := os.Stat(c.cfg.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, checkkit.NotApplicable(fmt.Sprintf("fsync probe directory %s does not exist", c.cfg.Dir))
	}
	if err != nil {
		return nil, fmt.Errorf("stat fsync probe directory: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("fsync probe directory %s is not a directory", c.cfg.Dir)
	}
	samples, err := c.probe(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	for _, s := range samples {
		if len(c.window) < c.cfg.Window {
			c.window = append(c.window, s)
		} else {
			c.window[c.next] = s
			c.next = (c.next + 1) % c.cfg.Window
		}
	}
	p99, maxD, n := P99(c.window), slices.Max(c.window), len(c.window)
	c.mu.Unlock()

	o := report.Observation{
		Attributes: map[string]float64{report.AttrFsyncP99Seconds: p99.Seconds()},
		Status:     report.StatusHealthy,
		Reason:     "FsyncFast",
	}
	switch {
	case p99 > c.cfg.DownP99:
		o.Status, o.Reason = report.StatusDown, "FsyncVerySlow"
	case p99 > c.cfg.DegradedP99:
		o.Status, o.Reason = report.StatusDegraded, "FsyncSlow"
	}
	o.Message = fmt.Sprintf("fdatasync p99 %s, max %s over the last %d probes of %d bytes in %s (degraded > %s, down > %s)",
		p99, maxD, n, WriteSize, c.cfg.Dir, c.cfg.DegradedP99, c.cfg.DownP99)
	return checkkit.Stamp(c, o), nil
}

// probe appends and syncs cfg.Samples times and returns each sync's duration.
func (c *Check) probe(ctx context.Context) ([]time.Duration, error) {
	path := filepath.Join(c.cfg.Dir, FileName)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open fsync probe file: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > maxFileSize {
		if err := f.Truncate(0); err != nil {
			return nil, fmt.Errorf("truncate fsync probe file: %w", err)
		}
	}
	out := make([]time.Duration, 0, c.cfg.Samples)
	for range c.cfg.Samples {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("fsync probe: %w", err)
		}
		if _, err := f.Write(c.buf); err != nil {
			return nil, fmt.Errorf("write fsync probe file: %w", err)
		}
		start := time.Now()
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			return nil, fmt.Errorf("fdatasync fsync probe file: %w", err)
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}

// P99 is the nearest-rank 99th percentile of ds (0 when empty).
func P99(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	idx := (len(s)*99 + 99) / 100 // ceil(0.99 n)
	return s[min(idx, len(s))-1]
}

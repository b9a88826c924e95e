// Package diskstats judges block devices from the kernel's /proc/diskstats
// (read with prometheus/procfs under an injected proc root): average read,
// write and flush latency per device over the interval, the cumulative
// averages on the first run.
package diskstats

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/procfs/blockdevice"

	"github.com/cozystack/cozy-health/agent/internal/checkkit"
	"github.com/cozystack/cozy-health/pkg/report"
)

// Config configures the check.
type Config struct {
	// ProcRoot is the host's /proc.
	ProcRoot string
	// Devices selects the devices judged.
	Devices *regexp.Regexp
	// Degraded and Down bound the average write or flush latency.
	Degraded, Down time.Duration
}

// Check is the diskstats check.
type Check struct {
	cfg Config

	// mu guards prev, the counters of the previous run by device name.
	mu   sync.Mutex
	prev map[string]blockdevice.Diskstats
}

var _ checkkit.Check = (*Check)(nil)

// New returns the check.
func New(cfg Config) *Check { return &Check{cfg: cfg, prev: map[string]blockdevice.Diskstats{}} }

// Name implements checkkit.Check.
func (*Check) Name() string { return report.CheckDiskstats }

// Component implements checkkit.Check.
func (*Check) Component() string { return report.ComponentDisk }

// Run implements checkkit.Check.
func (c *Check) Run(_ context.Context) ([]report.Observation, error) {
	if c.cfg.ProcRoot == "" {
		return nil, checkkit.NotApplicable("no proc root configured")
	}
	stats, err := Read(c.cfg.ProcRoot)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, checkkit.NotApplicable(err.Error())
		}
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := map[string]blockdevice.Diskstats{}
	var out []report.Observation
	for _, d := range stats {
		if c.cfg.Devices != nil && !c.cfg.Devices.MatchString(d.DeviceName) {
			continue
		}
		cur[d.DeviceName] = d
		out = append(out, c.judge(d, Delta(d, c.prev[d.DeviceName])))
	}
	c.prev = cur
	sort.Slice(out, func(i, j int) bool { return out[i].ResourceRef.Name < out[j].ResourceRef.Name })
	return checkkit.Stamp(c, out...), nil
}

// Read parses <procRoot>/diskstats.
func Read(procRoot string) ([]blockdevice.Diskstats, error) {
	if _, err := os.Stat(filepath.Join(procRoot, "diskstats")); err != nil {
		return nil, fmt.Errorf("read diskstats: %w", err)
	}
	// procfs wants a sys mount too; diskstats only reads proc.
	bfs, err := blockdevice.NewFS(procRoot, procRoot)
	if err != nil {
		return nil, fmt.Errorf("read diskstats: %w", err)
	}
	stats, err := bfs.ProcDiskstats()
	if err != nil {
		return nil, fmt.Errorf("read diskstats: %w", err)
	}
	return stats, nil
}

// Latency is a device's average latencies over an interval.
type Latency struct {
	Read, Write, Flush         time.Duration
	ReadIOs, WriteIOs, Flushes uint64
	HasFlush                   bool
}

// Delta computes average latencies between prev and cur; with no usable prev
// (first run, counters reset) it uses cur's totals since boot.
func Delta(cur, prev blockdevice.Diskstats) Latency {
	a, b := cur.IOStats, prev.IOStats
	if prev.DeviceName == "" || a.ReadIOs < b.ReadIOs || a.WriteIOs < b.WriteIOs || a.FlushRequestsCompleted < b.FlushRequestsCompleted ||
		a.ReadTicks < b.ReadTicks || a.WriteTicks < b.WriteTicks || a.TimeSpentFlushing < b.TimeSpentFlushing {
		b = blockdevice.IOStats{}
	}
	l := Latency{
		ReadIOs:  a.ReadIOs - b.ReadIOs,
		WriteIOs: a.WriteIOs - b.WriteIOs,
		Flushes:  a.FlushRequestsCompleted - b.FlushRequestsCompleted,
		HasFlush: cur.IoStatsCount >= 20,
	}
	avg := func(ticks, ios uint64) time.Duration {
		if ios == 0 {
			return 0
		}
		return time.Duration(float64(ticks) / float64(ios) * float64(time.Millisecond))
	}
	l.Read = avg(a.ReadTicks-b.ReadTicks, l.ReadIOs)
	l.Write = avg(a.WriteTicks-b.WriteTicks, l.WriteIOs)
	if l.HasFlush {
		l.Flush = avg(a.TimeSpentFlushing-b.TimeSpentFlushing, l.Flushes)
	}
	return l
}

func (c *Check) judge(d blockdevice.Diskstats, l Latency) report.Observation {
	o := report.Observation{
		ResourceRef: &report.ResourceRef{Kind: report.KindBlockDevice, Name: d.DeviceName},
		Attributes: map[string]float64{
			report.AttrReadLatencySeconds:  l.Read.Seconds(),
			report.AttrWriteLatencySeconds: l.Write.Seconds(),
		},
		Status: report.StatusHealthy,
		Reason: "LatencyNormal",
	}
	worst := max(l.Write, l.Flush)
	if l.HasFlush {
		o.Attributes[report.AttrFlushLatencySeconds] = l.Flush.Seconds()
	}
	switch {
	case worst > c.cfg.Down:
		o.Status, o.Reason = report.StatusDown, "LatencyVeryHigh"
	case worst > c.cfg.Degraded:
		o.Status, o.Reason = report.StatusDegraded, "LatencyHigh"
	}
	o.Message = fmt.Sprintf("%s: avg write %s over %d writes, read %s over %d reads", d.DeviceName, l.Write, l.WriteIOs, l.Read, l.ReadIOs)
	if l.HasFlush {
		o.Message += fmt.Sprintf(", flush %s over %d flushes", l.Flush, l.Flushes)
	}
	return o
}

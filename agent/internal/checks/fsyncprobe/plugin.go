package fsyncprobe

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/cozystack/cozy-health/agent/internal/checkkit"
	"github.com/cozystack/cozy-health/agent/internal/sources"
)

// Plugin wires the check (checks.Plugin): its flags.
type Plugin struct{ cfg Config }

// RegisterFlags implements checks.Plugin.
func (p *Plugin) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&p.cfg.Dir, "fsync-probe-dir", "/var/lib/cozy-health/fsync-probe", "directory on the etcd filesystem for the fsync probe; empty disables")
	fs.IntVar(&p.cfg.Samples, "fsync-probe-samples", 3, "write+fdatasync samples per run")
	fs.IntVar(&p.cfg.Window, "fsync-probe-window", 60, "samples the fsync p99 is computed over")
	// etcd wants fdatasync p99 < 10 ms; 10x that is a slow disk, and etcd
	// itself warns at 1 s ("slow fdatasync").
	fs.DurationVar(&p.cfg.DegradedP99, "fsync-probe-p99-degraded", 100*time.Millisecond, "probe fdatasync p99 above which the disk is Degraded")
	fs.DurationVar(&p.cfg.DownP99, "fsync-probe-p99-down", time.Second, "probe fdatasync p99 above which the disk is Down")
}

// Validate implements checks.Plugin.
func (p *Plugin) Validate() error {
	var errs []error
	if p.cfg.Samples < 1 || p.cfg.Samples > 100 {
		errs = append(errs, fmt.Errorf("--fsync-probe-samples %d: want 1..100", p.cfg.Samples))
	}
	if p.cfg.Window < p.cfg.Samples || p.cfg.Window > 10000 {
		errs = append(errs, fmt.Errorf("--fsync-probe-window %d: want --fsync-probe-samples..10000", p.cfg.Window))
	}
	return errors.Join(append(errs, checkkit.ValidateDurations("fsync-probe-p99", p.cfg.DegradedP99, p.cfg.DownP99))...)
}

// Build implements checks.Plugin.
func (p *Plugin) Build(*sources.Set) (checkkit.Check, error) { return New(p.cfg), nil }

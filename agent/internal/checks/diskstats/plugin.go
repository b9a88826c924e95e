package diskstats

import (
	"errors"
	"flag"
	"fmt"
	"regexp"
	"time"

	"github.com/cozystack/cozy-health/agent/internal/checkkit"
	"github.com/cozystack/cozy-health/agent/internal/sources"
)

// Plugin wires the check (checks.Plugin): its flags, and the shared
// --proc-root.
type Plugin struct {
	devices        string
	degraded, down time.Duration
}

// RegisterFlags implements checks.Plugin.
func (p *Plugin) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&p.devices, "diskstats-devices", `^(sd[a-z]+|vd[a-z]+|xvd[a-z]+|hd[a-z]+|nvme[0-9]+n[0-9]+|mmcblk[0-9]+)$`, "regular expression selecting judged block devices")
	fs.DurationVar(&p.degraded, "disk-latency-degraded", 100*time.Millisecond, "average device write/flush latency above which a device is Degraded")
	fs.DurationVar(&p.down, "disk-latency-down", time.Second, "average device write/flush latency above which a device is Down")
}

// Validate implements checks.Plugin.
func (p *Plugin) Validate() error {
	var errs []error
	if _, err := regexp.Compile(p.devices); err != nil {
		errs = append(errs, fmt.Errorf("--diskstats-devices: %w", err))
	}
	return errors.Join(append(errs, checkkit.ValidateDurations("disk-latency", p.degraded, p.down))...)
}

// Build implements checks.Plugin.
func (p *Plugin) Build(src *sources.Set) (checkkit.Check, error) {
	devices, err := regexp.Compile(p.devices)
	if err != nil {
		return nil, fmt.Errorf("compile --diskstats-devices: %w", err)
	}
	return New(Config{ProcRoot: src.ProcRoot, Devices: devices, Degraded: p.degraded, Down: p.down}), nil
}

package drbd

import (
	"flag"

	"github.com/cozystack/cozy-health/agent/internal/checkkit"
	"github.com/cozystack/cozy-health/agent/internal/sources"
)

// Plugin wires the check (checks.Plugin): its flag.
type Plugin struct{ drbdsetup string }

// RegisterFlags implements checks.Plugin.
func (p *Plugin) RegisterFlags(fs *flag.FlagSet) {
	// The shipped image has no drbdsetup: DRBD state comes from the
	// LINSTOR controller's view, read by the aggregator.
	fs.StringVar(&p.drbdsetup, "drbdsetup", "", "drbdsetup binary (name or path) for the kernel's own DRBD state; empty: the LINSTOR controller's view only, read by the aggregator (the shipped image has none)")
}

// Build implements checks.Plugin.
func (p *Plugin) Build(src *sources.Set) (checkkit.Check, error) {
	return New(p.drbdsetup, src.Node), nil
}

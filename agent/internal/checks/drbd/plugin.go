package drbd

import (
	"flag"

	"github.com/cozystack/cozy-health/agent/internal/check"
	"github.com/cozystack/cozy-health/agent/internal/sources"
)

// Plugin wires the check (checks.Plugin): its flag, and the shared LINSTOR
// client and --proc-root.
type Plugin struct{ drbdsetup string }

// RegisterFlags implements checks.Plugin.
func (p *Plugin) RegisterFlags(fs *flag.FlagSet) {
	// The shipped image has no drbdsetup: DRBD state comes from LINSTOR's
	// view.
	fs.StringVar(&p.drbdsetup, "drbdsetup", "", "drbdsetup binary (name or path) for the kernel's own DRBD state; empty: LINSTOR's view only (the shipped image has none)")
}

// Build implements checks.Plugin.
func (p *Plugin) Build(src *sources.Set) (check.Check, error) {
	return New(src.Linstor, p.drbdsetup, src.Node).WithProcRoot(src.ProcRoot), nil
}

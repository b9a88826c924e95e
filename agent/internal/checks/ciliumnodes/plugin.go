package ciliumnodes

import (
	"flag"

	"github.com/cozystack/cozy-health/agent/internal/checkkit"
	"github.com/cozystack/cozy-health/agent/internal/sources"
)

// Plugin wires the check (checks.Plugin): its flag.
type Plugin struct{ socket string }

// RegisterFlags implements checks.Plugin.
func (p *Plugin) RegisterFlags(fs *flag.FlagSet) {
	// cilium-health's socket (pkg/health/defaults).
	fs.StringVar(&p.socket, "cilium-health-socket", "/var/run/cilium/health.sock", "cilium-health API unix socket (node-to-node connectivity); empty disables")
}

// Build implements checks.Plugin.
func (p *Plugin) Build(src *sources.Set) (checkkit.Check, error) { return New(p.socket, src.Node), nil }

package ciliumagent

import (
	"flag"

	"github.com/cozystack/cozy-health/agent/internal/checkkit"
	"github.com/cozystack/cozy-health/agent/internal/sources"
)

// Plugin wires the check (checks.Plugin): its flag.
type Plugin struct{ socket string }

// RegisterFlags implements checks.Plugin.
func (p *Plugin) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&p.socket, "cilium-socket", "/var/run/cilium/cilium.sock", "Cilium agent API unix socket; empty disables")
}

// Build implements checks.Plugin.
func (p *Plugin) Build(*sources.Set) (checkkit.Check, error) { return New(p.socket), nil }

package talosservices

import (
	"github.com/cozystack/cozy-health/agent/internal/checkkit"
	"github.com/cozystack/cozy-health/agent/internal/sources"
)

// Plugin wires the check (checks.Plugin); it reads the shared Talos client.
type Plugin struct{}

// Build implements checks.Plugin.
func (Plugin) Build(src *sources.Set) (checkkit.Check, error) { return New(src.Talos), nil }

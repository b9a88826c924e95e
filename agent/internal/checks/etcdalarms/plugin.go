package etcdalarms

import (
	"github.com/cozystack/cozy-health/agent/internal/checkkit"
	"github.com/cozystack/cozy-health/agent/internal/sources"
)

// Plugin wires the check (checks.Plugin); it reads the shared Talos client
// and Node role reader.
type Plugin struct{}

// Build implements checks.Plugin.
func (Plugin) Build(src *sources.Set) (checkkit.Check, error) {
	return New(src.Talos).WithRoles(src.Roles), nil
}

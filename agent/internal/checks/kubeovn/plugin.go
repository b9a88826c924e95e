package kubeovn

import (
	"errors"
	"flag"
	"fmt"

	"github.com/cozystack/cozy-health/agent/internal/checkkit"
	"github.com/cozystack/cozy-health/agent/internal/sources"
)

// Plugin wires the check (checks.Plugin): its flags.
type Plugin struct {
	url string
	th  Thresholds
}

// RegisterFlags implements checks.Plugin.
func (p *Plugin) RegisterFlags(fs *flag.FlagSet) {
	// The pinger runs on the pod network, so off by default.
	fs.StringVar(&p.url, "kube-ovn-pinger-url", "", "kube-ovn-pinger metrics URL the agent can reach (the pinger listens on the pod network); empty disables")
	fs.Float64Var(&p.th.PingLossDegraded, "kube-ovn-ping-loss-degraded", 0.05, "node ping loss ratio above which kube-ovn is Degraded")
	fs.Float64Var(&p.th.PingLossDown, "kube-ovn-ping-loss-down", 0.5, "node ping loss ratio above which kube-ovn is Down")
}

// Validate implements checks.Plugin.
func (p *Plugin) Validate() error {
	var errs []error
	if p.th.PingLossDegraded <= 0 || p.th.PingLossDown < p.th.PingLossDegraded || p.th.PingLossDown > 1 {
		errs = append(errs, fmt.Errorf("--kube-ovn-ping-loss-degraded %v / -down %v: want 0 < degraded <= down <= 1", p.th.PingLossDegraded, p.th.PingLossDown))
	}
	return errors.Join(append(errs, checkkit.ValidateURL("kube-ovn-pinger-url", p.url))...)
}

// Build implements checks.Plugin.
func (p *Plugin) Build(src *sources.Set) (checkkit.Check, error) {
	return New(p.url, src.Node, p.th), nil
}

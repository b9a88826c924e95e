// Package talosservices judges the Talos system services that every node
// needs (kubelet, cri) from the Talos ServiceList; the etcd service of
// control-plane nodes is judged by the etcd-member check.
package talosservices

import (
	"context"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"

	"github.com/cozystack/cozy-health/agent/internal/checkkit"
	"github.com/cozystack/cozy-health/agent/internal/sources/machineapi"
	"github.com/cozystack/cozy-health/pkg/report"
)

// Services are the Talos service IDs judged for the node component. The etcd
// service is judged by the etcd-member check, under the etcd component: a
// stopped etcd member is an etcd fault (quorum projection, drain), not a
// reason to call the whole node Down.
var Services = []string{"kubelet", "cri"}

// required are the services every Talos node runs.
var required = map[string]bool{"kubelet": true, "cri": true}

// Check is the talos-services check.
type Check struct{ talos *machineapi.Client }

var _ checkkit.Check = (*Check)(nil)

// New returns the check reading services through c.
func New(c *machineapi.Client) *Check { return &Check{talos: c} }

// Name implements checkkit.Check.
func (*Check) Name() string { return report.CheckTalosServices }

// Component implements checkkit.Check.
func (*Check) Component() string { return report.ComponentNode }

// Run implements checkkit.Check.
func (c *Check) Run(ctx context.Context) ([]report.Observation, error) {
	svcs, err := machineapi.ServiceList(ctx, c.talos)
	if err != nil {
		return nil, err
	}
	return checkkit.Stamp(c, Judge(svcs)), nil
}

// Judge turns a ServiceList into the talos-services observation.
func Judge(svcs []*machine.ServiceInfo) report.Observation {
	status, reason := report.StatusHealthy, "ServicesHealthy"
	var parts []string
	for _, id := range Services {
		s := machineapi.Find(svcs, id)
		if s == nil {
			if required[id] {
				status, reason = report.StatusDown, "ServiceMissing"
				parts = append(parts, id+" missing")
			}
			continue
		}
		st, why := machineapi.JudgeService(s)
		if report.Worse(status, st) != status {
			status, reason = st, why
		}
		parts = append(parts, machineapi.Describe(s))
	}
	return report.Observation{Status: status, Reason: reason, Message: strings.Join(parts, "; ")}
}

// Package talosservices judges the Talos system services that every node
// needs (kubelet, cri) from the Talos ServiceList; the etcd service of
// control-plane nodes is judged by the etcd-member check.
package talosservices

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"

	"github.com/cozystack/cozy-health/agent/internal/check"
	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/talos"
)

// Services are the Talos service IDs judged for the node component. The etcd
// service is judged by the etcd-member check, under the etcd component: a
// stopped etcd member is an etcd fault (quorum projection, drain), not a
// reason to call the whole node Down.
var Services = []string{"kubelet", "cri"}

// required are the services every Talos node runs.
var required = map[string]bool{"kubelet": true, "cri": true}

// Check is the talos-services check.
type Check struct{ talos *talos.Client }

var _ check.Check = (*Check)(nil)

// New returns the check reading services through c.
func New(c *talos.Client) *Check { return &Check{talos: c} }

// Name implements check.Check.
func (*Check) Name() string { return report.CheckTalosServices }

// Component implements check.Check.
func (*Check) Component() string { return report.ComponentNode }

// Run implements check.Check.
func (c *Check) Run(ctx context.Context) ([]report.Observation, error) {
	svcs, err := ServiceList(ctx, c.talos)
	if err != nil {
		return nil, err
	}
	return []report.Observation{Judge(svcs)}, nil
}

// InputFix says what to do when the talosconfig is missing or unusable.
const InputFix = "mount Secret cozy-health-agent-talos-secrets there; Talos issues it for the talos.dev ServiceAccount once the kubernetesTalosAPIAccess machine-config patch is applied"

// ServiceList reads the services. No talosconfig configured is "not
// applicable"; one configured but missing or unusable is a
// *check.InputError (Unknown, saying what to mount).
func ServiceList(ctx context.Context, c *talos.Client) ([]*machine.ServiceInfo, error) {
	if c == nil {
		return nil, check.NotApplicable("no talosconfig configured")
	}
	svcs, err := c.ServiceList(ctx)
	if err != nil {
		var ce *talos.ConfigError
		if errors.As(err, &ce) {
			return nil, check.Input("talosconfig", ce.Path, InputFix, ce.Err)
		}
		return nil, err
	}
	return svcs, nil
}

// Find returns the service with id, or nil.
func Find(svcs []*machine.ServiceInfo, id string) *machine.ServiceInfo {
	for _, s := range svcs {
		if s.GetId() == id {
			return s
		}
	}
	return nil
}

// ServiceStatus judges one Talos service.
func ServiceStatus(s *machine.ServiceInfo) (report.Status, string) {
	h := s.GetHealth()
	switch {
	case s.GetState() != "Running":
		return report.StatusDown, "ServiceNotRunning"
	case h == nil || h.GetUnknown():
		return report.StatusUnknown, "ServiceHealthUnknown"
	case !h.GetHealthy():
		return report.StatusDegraded, "ServiceUnhealthy"
	}
	return report.StatusHealthy, "ServiceHealthy"
}

// Describe renders a service for people.
func Describe(s *machine.ServiceInfo) string {
	h := s.GetHealth()
	health := "health unknown"
	if h != nil && !h.GetUnknown() {
		health = "healthy"
		if !h.GetHealthy() {
			health = "unhealthy"
		}
	}
	out := fmt.Sprintf("%s %s, %s", s.GetId(), s.GetState(), health)
	if msg := h.GetLastMessage(); msg != "" {
		out += ": " + msg
	}
	return out
}

// Judge turns a ServiceList into the talos-services observation.
func Judge(svcs []*machine.ServiceInfo) report.Observation {
	status, reason := report.StatusHealthy, "ServicesHealthy"
	var parts []string
	for _, id := range Services {
		s := Find(svcs, id)
		if s == nil {
			if required[id] {
				status, reason = report.StatusDown, "ServiceMissing"
				parts = append(parts, id+" missing")
			}
			continue
		}
		st, why := ServiceStatus(s)
		if report.Worse(status, st) != status {
			status, reason = st, why
		}
		parts = append(parts, Describe(s))
	}
	return report.Observation{Status: status, Reason: reason, Message: strings.Join(parts, "; ")}
}

// learnerUnsupported is etcd's answer (rpctypes.ErrGRPCNotSupportedForLearner)
// when a learner is asked for something only voting members serve, such as
// the member or alarm list; Talos passes it on in its error's message.
const learnerUnsupported = "rpc not supported for learner"

// LearnerUnsupported reports whether msg is etcd's refusal to serve a learner.
func LearnerUnsupported(msg string) bool { return strings.Contains(msg, learnerUnsupported) }

// LearnerNotApplicable turns etcd's "not supported for learner" answer into
// "not applicable": a learner cannot list members or alarms, and the voting
// members report them for the cluster. Other errors pass unchanged.
func LearnerNotApplicable(err error, what string) error {
	if err != nil && LearnerUnsupported(err.Error()) {
		return check.NotApplicable("this etcd member is a learner: the voting members report the " + what)
	}
	return err
}

// RequireEtcd returns this node's etcd service, or a "not applicable" error
// on a node without one (not a control-plane node, no talosconfig).
//
// A talosconfig that is configured but missing or unusable is "not
// applicable" here too: without it nothing tells a control-plane node from
// a worker, and an Unknown etcd member reported by every worker would count
// as a voting member in etcd's quorum projection. The talos-services check,
// which every node runs, carries the Unknown and what to mount.
func RequireEtcd(ctx context.Context, c *talos.Client) (*machine.ServiceInfo, error) {
	svcs, err := ServiceList(ctx, c)
	var ie *check.InputError
	if errors.As(err, &ie) {
		return nil, check.NotApplicable("the Talos API is not reachable without the talosconfig (talos-services reads Unknown): " + ie.Message)
	}
	if err != nil {
		return nil, err
	}
	etcd := Find(svcs, "etcd")
	if etcd == nil {
		return nil, check.NotApplicable("no etcd service on this node: not a control-plane node")
	}
	return etcd, nil
}

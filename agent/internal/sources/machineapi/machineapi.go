// Package machineapi is the agent's side of the Talos machine API
// (machine.MachineService, the gRPC API talosctl speaks to apid and
// machined: `talosctl services`, `talosctl etcd members`, `talosctl etcd
// alarm list`): the client (the shared talos.Client of the repository's
// talos package, opened once from --talosconfig and shared by every check
// that asks Talos) and the helpers the Talos and etcd checks share: reading
// machined's service list, judging one service, and deciding whether this
// node runs an etcd member at all (RequireEtcd).
package machineapi

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cozystack/cozy-health/agent/internal/checkkit"
	"github.com/cozystack/cozy-health/agent/internal/sources/noderole"
	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/talos"
)

// Client is the Talos API client (the repository's talos package).
type Client = talos.Client

// InputFix says what to do when the talosconfig is missing or unusable.
const InputFix = "mount Secret cozy-health-agent-talos-secrets there; Talos issues it for the talos.dev ServiceAccount once the kubernetesTalosAPIAccess machine-config patch is applied"

// ServiceList reads the services. No talosconfig configured is "not
// applicable"; one configured but missing or unusable is a
// *checkkit.InputError (Unknown, saying what to mount).
func ServiceList(ctx context.Context, c *Client) ([]*machine.ServiceInfo, error) {
	if c == nil {
		return nil, checkkit.NotApplicable("no talosconfig configured")
	}
	svcs, err := c.ServiceList(ctx)
	if err != nil {
		var ce *talos.ConfigError
		if errors.As(err, &ce) {
			return nil, checkkit.Input("talosconfig", ce.Path, InputFix, ce.Err)
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

// JudgeService judges one Talos service: its health status and the reason.
func JudgeService(s *machine.ServiceInfo) (report.Status, string) {
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
		return checkkit.NotApplicable("this etcd member is a learner: the voting members report the " + what)
	}
	return err
}

// ReasonTalosAPIAccessMissing: this control-plane node's etcd cannot be
// read because the agent has no usable access to the Talos API (no
// talosconfig, a broken one, or credentials Talos refuses).
const ReasonTalosAPIAccessMissing = "TalosAPIAccessMissing"

// AccessPatch is what gives the agent its talosconfig.
const AccessPatch = "apply talos/manifests/talos-api-access-patch.yaml (Talos then issues Secret cozy-health-agent-talos-secrets)"

// RequireEtcd returns this node's etcd service, or why there is none to
// judge:
//
//   - not applicable when the node is known not to be a control-plane
//     node: Talos lists no etcd service, or (Talos cannot be asked) its
//     Node object has no node-role.kubernetes.io/control-plane label;
//   - a *checkkit.InputError with ReasonTalosAPIAccessMissing (Unknown,
//     naming what is missing) when Talos cannot be asked (no talosconfig,
//     a broken one, credentials refused) and the node is a control-plane
//     node or its role cannot be read: "could not ask" is never "not
//     applicable", or drain would call an unread member safe;
//   - other errors (timeouts, Talos unavailable) as they are (Unknown).
//
// With the Talos checks disabled (--talosconfig empty, c nil) only a known
// control-plane node reads Unknown; elsewhere the operator's choice stands.
func RequireEtcd(ctx context.Context, c *Client, roles *noderole.Reader) (*machine.ServiceInfo, error) {
	if c == nil {
		if role, _ := roles.Role(ctx); role == noderole.ControlPlane {
			return nil, &checkkit.InputError{Reason: ReasonTalosAPIAccessMissing,
				Message: "the Talos checks are disabled (--talosconfig empty) on a control-plane node: enable agent.sources.talos and " + AccessPatch}
		}
		return nil, checkkit.NotApplicable("no talosconfig configured")
	}
	svcs, err := c.ServiceList(ctx)
	if err == nil {
		etcd := Find(svcs, "etcd")
		if etcd == nil {
			return nil, checkkit.NotApplicable("Talos lists no etcd service on this node: not a control-plane node")
		}
		return etcd, nil
	}
	missing := accessMissing(err)
	if missing == "" {
		return nil, err
	}
	role, roleErr := roles.Role(ctx)
	switch role {
	case noderole.Worker:
		return nil, checkkit.NotApplicable(fmt.Sprintf("%s, and the Node has no %s label: not a control-plane node", missing, noderole.ControlPlaneLabel))
	case noderole.ControlPlane:
		return nil, &checkkit.InputError{Reason: ReasonTalosAPIAccessMissing, Err: err,
			Message: fmt.Sprintf("%s: %s; this control-plane node's etcd member is unknown until then", missing, AccessPatch)}
	}
	return nil, &checkkit.InputError{Reason: ReasonTalosAPIAccessMissing, Err: err,
		Message: fmt.Sprintf("%s: %s; whether this node runs an etcd member is unknown (%v)", missing, AccessPatch, roleErr)}
}

// accessMissing says what is missing when err means the agent has no
// usable access to the Talos API, or "" when err is something else.
func accessMissing(err error) string {
	var ce *talos.ConfigError
	switch {
	case errors.Is(err, talos.ErrNoConfig) && errors.As(err, &ce):
		return "no talosconfig at " + ce.Path
	case errors.As(err, &ce):
		return fmt.Sprintf("talosconfig %s unusable (%v)", ce.Path, ce.Err)
	}
	switch status.Code(err) {
	case codes.PermissionDenied, codes.Unauthenticated:
		return fmt.Sprintf("the Talos API refuses the agent's credentials (%v)", err)
	}
	return ""
}

// DefaultConfigFile is where the Talos ServiceAccount secret is mounted.
const DefaultConfigFile = "/var/run/secrets/talos.dev/config"

// Flags are the Talos API's flags.
type Flags struct {
	// ConfigFile is the talosconfig file (--talosconfig); "" disables the
	// Talos checks.
	ConfigFile string
	// Endpoints override the talosconfig's endpoints (--talos-endpoints).
	Endpoints checkkit.ListFlag
	// Node is sent as the "node" metadata so the endpoint proxies to this
	// node; "" asks the endpoint itself (--talos-node).
	Node string
}

// RegisterFlags binds the flags, with their defaults, to fs.
func (f *Flags) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&f.ConfigFile, "talosconfig", DefaultConfigFile, "talosconfig file (re-read when it changes); empty disables the Talos checks")
	fs.Var(&f.Endpoints, "talos-endpoints", "override the talosconfig endpoints (repeatable or comma list)")
	fs.StringVar(&f.Node, "talos-node", "", "Talos node (IP) the endpoint proxies requests to; empty asks the endpoint itself")
}

// Open returns the client, or nil when no talosconfig is configured.
func (f *Flags) Open(log *zap.Logger) (*Client, error) {
	if f.ConfigFile == "" {
		return nil, nil
	}
	return talos.New(talos.Config{ConfigFile: f.ConfigFile, Endpoints: f.Endpoints, Node: f.Node}, log)
}

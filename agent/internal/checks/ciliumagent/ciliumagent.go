// Package cilium judges the local Cilium agent from its REST API on its unix
// socket: GET /v1/healthz returns a StatusResponse whose "cilium" state is
// the agent's own verdict, with the state of each subsystem beside it.
package ciliumagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"
	"syscall"

	"github.com/cozystack/cozy-health/agent/internal/checkkit"
	"github.com/cozystack/cozy-health/agent/internal/sources/unixhttp"
	"github.com/cozystack/cozy-health/pkg/report"
)

// HealthzURL is the request URL; the host part is ignored on a unix socket.
const HealthzURL = "http://cilium/v1/healthz"

// Status is Cilium's models.Status.
type Status struct {
	State string `json:"state"`
	Msg   string `json:"msg,omitempty"`
}

// K8sStatus is Cilium's models.K8sStatus.
type K8sStatus struct {
	State          string   `json:"state"`
	Msg            string   `json:"msg,omitempty"`
	K8sAPIVersions []string `json:"k8s-api-versions,omitempty"`
}

// ClusterStatus is the part of Cilium's models.ClusterStatus read here.
type ClusterStatus struct {
	CiliumHealth *Status `json:"ciliumHealth,omitempty"`
	Self         string  `json:"self,omitempty"`
}

// StatusResponse is the part of Cilium's models.StatusResponse read here.
type StatusResponse struct {
	Cilium           *Status        `json:"cilium,omitempty"`
	Kvstore          *Status        `json:"kvstore,omitempty"`
	ContainerRuntime *Status        `json:"container-runtime,omitempty"`
	Kubernetes       *K8sStatus     `json:"kubernetes,omitempty"`
	Cluster          *ClusterStatus `json:"cluster,omitempty"`
	CNIFile          *Status        `json:"cni-file,omitempty"`
}

// Cilium's Status.state enum.
const (
	StateOk       = "Ok"
	StateWarning  = "Warning"
	StateFailure  = "Failure"
	StateDisabled = "Disabled"
)

// InputFix says what to do when the socket is not there: the agent reaches
// it through a hostPath mount of Cilium's run directory; connecting to a
// unix socket needs write permission on it.
const InputFix = "mount hostPath /var/run/cilium (the Cilium agent's run directory) writable there, or set --cilium-socket= on a cluster without Cilium"

// Check is the cilium-agent check.
type Check struct {
	socket string
	client *unixhttp.Client
}

var _ checkkit.Check = (*Check)(nil)

// New returns the check talking to socket.
func New(socket string) *Check {
	return &Check{socket: socket, client: unixhttp.New(socket)}
}

// Name implements checkkit.Check.
func (*Check) Name() string { return report.CheckCiliumAgent }

// Component implements checkkit.Check.
func (*Check) Component() string { return report.ComponentCilium }

// Run implements checkkit.Check.
func (c *Check) Run(ctx context.Context) ([]report.Observation, error) {
	if c.socket == "" {
		return nil, checkkit.NotApplicable("no cilium socket configured")
	}
	if _, err := os.Stat(c.socket); err != nil {
		return nil, checkkit.Input("Cilium agent socket", c.socket, InputFix, err)
	}
	body, err := c.client.Get(ctx, HealthzURL)
	if errors.Is(err, fs.ErrPermission) {
		return nil, checkkit.Input("Cilium agent socket", c.socket, InputFix, err)
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return checkkit.Stamp(c, report.Observation{Status: report.StatusDown, Reason: "AgentNotListening",
			Message: fmt.Sprintf("cilium socket %s exists but nothing accepts connections: %v", c.socket, err)}), nil
	}
	if err != nil {
		return nil, fmt.Errorf("read cilium healthz: %w", err)
	}
	sr, err := Parse(body)
	if err != nil {
		return nil, err
	}
	return checkkit.Stamp(c, Judge(sr)), nil
}

// Parse decodes a StatusResponse; one without a "cilium" state is rejected.
func Parse(body []byte) (*StatusResponse, error) {
	var sr StatusResponse
	if err := json.Unmarshal(body, &sr); err != nil {
		return nil, fmt.Errorf("decode cilium healthz: %w", err)
	}
	if sr.Cilium == nil || sr.Cilium.State == "" {
		return nil, errors.New("decode cilium healthz: no cilium state in the response")
	}
	return &sr, nil
}

// Judge turns a StatusResponse into the cilium-agent observation.
func Judge(sr *StatusResponse) report.Observation {
	subsystems := map[string]*Status{
		"kvstore":           sr.Kvstore,
		"container-runtime": sr.ContainerRuntime,
		"cni-file":          sr.CNIFile,
	}
	if sr.Kubernetes != nil {
		subsystems["kubernetes"] = &Status{State: sr.Kubernetes.State, Msg: sr.Kubernetes.Msg}
	}
	if sr.Cluster != nil {
		subsystems["cilium-health"] = sr.Cluster.CiliumHealth
	}
	var failing []string
	for name, s := range subsystems {
		if s != nil && (s.State == StateFailure || s.State == StateWarning) {
			failing = append(failing, fmt.Sprintf("%s %s: %s", name, s.State, s.Msg))
		}
	}
	sort.Strings(failing)

	o := report.Observation{}
	msg := fmt.Sprintf("cilium %s: %s", sr.Cilium.State, sr.Cilium.Msg)
	switch sr.Cilium.State {
	case StateOk:
		o.Status, o.Reason = report.StatusHealthy, "AgentOk"
		if len(failing) > 0 {
			o.Status, o.Reason = report.StatusDegraded, "SubsystemNotOk"
		}
	case StateWarning:
		o.Status, o.Reason = report.StatusDegraded, "AgentWarning"
	case StateFailure:
		o.Status, o.Reason = report.StatusDown, "AgentFailure"
	default:
		o.Status, o.Reason = report.StatusUnknown, "AgentStateUnknown"
	}
	if len(failing) > 0 {
		msg += "; " + strings.Join(failing, "; ")
	}
	o.Message = msg
	return o
}

// Package ciliumnodes reads Cilium's node-to-node view: cilium-health, the
// prober built into every Cilium agent, pings every other node's address
// (ICMP, and HTTP to cilium-health's port 4240 on the node) and its health
// endpoint on the pod network, and serves the last results as GET
// /v1beta/status on its unix socket (/var/run/cilium/health.sock). The
// check turns "this node cannot reach node X" into a fact that names both
// nodes: the observation is this node's, pinned to Node X.
//
// The JSON shape is Cilium's api/v1/health models (HealthStatusResponse,
// NodeStatus, HostStatus, EndpointStatus, PathStatus, ConnectivityStatus).
// A probe's "status" is a human-readable error; an empty status with a
// latency is a success, as cilium-health's own client reads it.
package ciliumnodes

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

// StatusURL is the request URL; the host part is ignored on a unix socket.
const StatusURL = "http://cilium-health/v1beta/status"

// Reasons.
const (
	ReasonAllNodesReachable         = "AllNodesReachable"
	ReasonNoOtherNodes              = "NoOtherNodes"
	ReasonNoProbeResults            = "NoProbeResults"
	ReasonNodesUnreachable          = "NodesUnreachable"
	ReasonNodeIsolated              = "NodeIsolated"
	ReasonNodeUnreachable           = "NodeUnreachable"
	ReasonHealthEndpointUnreachable = "HealthEndpointUnreachable"
	ReasonHealthAPINotListening     = "HealthAPINotListening"
)

// ConnectivityStatus is models.ConnectivityStatus.
type ConnectivityStatus struct {
	// Latency is the round trip in nanoseconds.
	Latency int64 `json:"latency,omitempty"`
	// Status is a human-readable error; empty on success.
	Status string `json:"status,omitempty"`
}

// PathStatus is models.PathStatus.
type PathStatus struct {
	IP   string              `json:"ip,omitempty"`
	ICMP *ConnectivityStatus `json:"icmp,omitempty"`
	HTTP *ConnectivityStatus `json:"http,omitempty"`
}

// AddressStatus is models.HostStatus and models.EndpointStatus (same shape).
type AddressStatus struct {
	PrimaryAddress     *PathStatus   `json:"primary-address,omitempty"`
	SecondaryAddresses []*PathStatus `json:"secondary-addresses,omitempty"`
}

// NodeStatus is models.NodeStatus.
type NodeStatus struct {
	// Name is "<cluster>/<node>" (cilium's node full name) or "<node>".
	Name           string         `json:"name,omitempty"`
	Host           *AddressStatus `json:"host,omitempty"`
	HealthEndpoint *AddressStatus `json:"health-endpoint,omitempty"`
	// Endpoint is the deprecated form of HealthEndpoint.
	Endpoint *PathStatus `json:"endpoint,omitempty"`
}

// SelfStatus is models.SelfStatus.
type SelfStatus struct {
	Name string `json:"name,omitempty"`
}

// HealthStatusResponse is models.HealthStatusResponse.
type HealthStatusResponse struct {
	Timestamp string        `json:"timestamp,omitempty"`
	Local     *SelfStatus   `json:"local,omitempty"`
	Nodes     []*NodeStatus `json:"nodes,omitempty"`
}

// Check is the cilium-node-connectivity check.
type Check struct {
	socket, node string
	client       *unixhttp.Client
}

var _ checkkit.Check = (*Check)(nil)

// New returns the check reading socket for node.
func New(socket, node string) *Check {
	return &Check{socket: socket, node: node, client: unixhttp.New(socket)}
}

// Name implements checkkit.Check.
func (*Check) Name() string { return report.CheckCiliumNodeConnectivity }

// Component implements checkkit.Check.
func (*Check) Component() string { return report.ComponentCilium }

// Run implements checkkit.Check.
func (c *Check) Run(ctx context.Context) ([]report.Observation, error) {
	if c.socket == "" {
		return nil, checkkit.NotApplicable("no cilium-health socket configured")
	}
	if _, err := os.Stat(c.socket); errors.Is(err, fs.ErrNotExist) {
		return nil, checkkit.NotApplicable(fmt.Sprintf("cilium-health socket %s does not exist (health checking disabled, or no Cilium here)", c.socket))
	}
	body, err := c.client.Get(ctx, StatusURL)
	if errors.Is(err, syscall.ECONNREFUSED) {
		return checkkit.Stamp(c, report.Observation{Status: report.StatusUnknown, Reason: ReasonHealthAPINotListening,
			Message: fmt.Sprintf("cilium-health socket %s exists but nothing accepts connections: node-to-node connectivity unknown: %v", c.socket, err)}), nil
	}
	if err != nil {
		return nil, fmt.Errorf("read cilium-health status: %w", err)
	}
	st, err := Parse(body)
	if err != nil {
		return nil, err
	}
	return checkkit.Stamp(c, Judge(st, c.node)...), nil
}

// Parse decodes a HealthStatusResponse.
func Parse(body []byte) (*HealthStatusResponse, error) {
	var st HealthStatusResponse
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, fmt.Errorf("decode cilium-health status: %w", err)
	}
	return &st, nil
}

// NodeName is the Kubernetes node name of a cilium node name
// ("<cluster>/<node>").
func NodeName(name string) string {
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		return name[i+1:]
	}
	return name
}

// pathProblem says what is wrong with a path, "" when it answered; ok is
// false when it was not probed at all.
func pathProblem(p *PathStatus) (problem string, probed bool) {
	if p == nil || (p.ICMP == nil && p.HTTP == nil) {
		return "", false
	}
	var parts []string
	if p.ICMP != nil && p.ICMP.Status != "" {
		parts = append(parts, "ICMP: "+p.ICMP.Status)
	}
	if p.HTTP != nil && p.HTTP.Status != "" {
		parts = append(parts, "HTTP: "+p.HTTP.Status)
	}
	return strings.Join(parts, ", "), true
}

func primary(a *AddressStatus) *PathStatus {
	if a == nil {
		return nil
	}
	return a.PrimaryAddress
}

// Judge turns cilium-health's status into this node's observations: the
// summary first, then one per unreachable node.
func Judge(st *HealthStatusResponse, self string) []report.Observation {
	local := ""
	if st.Local != nil {
		local = st.Local.Name
	}
	var probed, listed int
	var unprobed []string
	var peers []report.Observation
	for _, n := range st.Nodes {
		if n == nil {
			continue
		}
		name := NodeName(n.Name)
		if n.Name == local || name == self {
			continue
		}
		host := primary(n.Host)
		hp, hostProbed := pathProblem(host)
		ep := n.Endpoint
		if p := primary(n.HealthEndpoint); p != nil {
			ep = p
		}
		epp, epProbed := pathProblem(ep)
		listed++
		if !hostProbed && !epProbed {
			// Listed but not probed yet (a cilium-agent restart, a node
			// that just joined): nothing is known of this path.
			unprobed = append(unprobed, name)
			continue
		}
		probed++
		ip := ""
		if host != nil {
			ip = " (" + host.IP + ")"
		}
		switch {
		case hp != "":
			msg := fmt.Sprintf("%s cannot reach node %s%s: %s", self, name, ip, hp)
			if epp != "" {
				msg += fmt.Sprintf("; its health endpoint %s: %s", ep.IP, epp)
			}
			peers = append(peers, report.Observation{Status: report.StatusDegraded, Reason: ReasonNodeUnreachable, Message: msg,
				ResourceRef: &report.ResourceRef{Kind: report.KindNode, Name: name}})
		case epp != "":
			peers = append(peers, report.Observation{Status: report.StatusDegraded, Reason: ReasonHealthEndpointUnreachable,
				Message:     fmt.Sprintf("%s reaches node %s%s but not its health endpoint %s on the pod network: %s", self, name, ip, ep.IP, epp),
				ResourceRef: &report.ResourceRef{Kind: report.KindNode, Name: name}})
		}
	}
	sort.Slice(peers, func(i, j int) bool { return peers[i].ResourceRef.Name < peers[j].ResourceRef.Name })
	sort.Strings(unprobed)
	sum := report.Observation{Attributes: map[string]float64{
		report.AttrNodesProbed: float64(probed), report.AttrNodesUnreachable: float64(len(peers)),
	}}
	switch {
	case len(st.Nodes) == 0:
		sum.Status, sum.Reason = report.StatusUnknown, ReasonNoProbeResults
		sum.Message = "cilium-health has no probe results yet"
	case listed == 0:
		sum.Status, sum.Reason = report.StatusHealthy, ReasonNoOtherNodes
		sum.Message = "cilium-health lists no other node"
	case probed == 0:
		// Peers are listed but none probed yet: no evidence either way.
		sum.Status, sum.Reason = report.StatusUnknown, ReasonNoProbeResults
		sum.Message = fmt.Sprintf("cilium-health lists %d other nodes but has probed none yet (after a cilium-agent restart or a node join): %s", listed, list(unprobed))
	case len(peers) == 0:
		sum.Status, sum.Reason = report.StatusHealthy, ReasonAllNodesReachable
		sum.Message = fmt.Sprintf("all %d other nodes reachable", probed)
	case len(peers) == probed:
		sum.Status, sum.Reason = report.StatusDown, ReasonNodeIsolated
		sum.Message = fmt.Sprintf("%s reaches none of the %d other nodes: %s", self, probed, names(peers))
	default:
		sum.Status, sum.Reason = report.StatusDegraded, ReasonNodesUnreachable
		sum.Message = fmt.Sprintf("%s cannot reach %d of %d other nodes: %s", self, len(peers), probed, names(peers))
	}
	if probed > 0 && len(unprobed) > 0 {
		// The verdict covers the probed nodes only; say which are not.
		sum.Message += fmt.Sprintf(" (%d probed of %d listed; not probed yet: %s)", probed, listed, list(unprobed))
	}
	if len(peers) > report.MaxUnreachableNodes {
		peers = peers[:report.MaxUnreachableNodes]
	}
	return append([]report.Observation{sum}, peers...)
}

// list names at most 8 nodes.
func list(nodes []string) string {
	if len(nodes) > 8 {
		return strings.Join(nodes[:8], ", ") + fmt.Sprintf(" and %d more", len(nodes)-8)
	}
	return strings.Join(nodes, ", ")
}

func names(peers []report.Observation) string {
	out := make([]string, 0, min(len(peers), 8))
	for i, p := range peers {
		if i == 8 {
			out = append(out, fmt.Sprintf("and %d more", len(peers)-8))
			break
		}
		out = append(out, p.ResourceRef.Name)
	}
	return strings.Join(out, ", ")
}

// Package report holds cozy-health's domain vocabulary: statuses, observations
// and node reports. It has no I/O, no protobuf and no Kubernetes types; the
// wire form lives in proto/ and the Kubernetes form in pkg/apis, each with one
// conversion point (pkg/wire and the aggregator's writer).
package report

import (
	"fmt"
	"time"
)

// Status is the health of an observation, a node or a component.
type Status uint8

// The statuses, in the order of their zero value first. Use Worse or Rank to
// compare them; the numeric order is not the precedence.
const (
	// StatusUnknown means there is no trustworthy data.
	StatusUnknown Status = iota
	// StatusHealthy means the facts are good.
	StatusHealthy
	// StatusDegraded means the component works with reduced margin.
	StatusDegraded
	// StatusDown means the component does not work.
	StatusDown
)

// String returns the status as the Health API spells it.
func (s Status) String() string {
	switch s {
	case StatusHealthy:
		return "Healthy"
	case StatusDegraded:
		return "Degraded"
	case StatusDown:
		return "Down"
	default:
		return "Unknown"
	}
}

// ParseStatus parses a status spelled as the Health API spells it.
func ParseStatus(s string) (Status, error) {
	switch s {
	case "Healthy":
		return StatusHealthy, nil
	case "Degraded":
		return StatusDegraded, nil
	case "Down":
		return StatusDown, nil
	case "Unknown":
		return StatusUnknown, nil
	}
	return StatusUnknown, fmt.Errorf("parse status %q: want Healthy, Degraded, Down or Unknown", s)
}

// Statuses lists every status, in precedence order from best to worst.
var Statuses = []Status{StatusHealthy, StatusUnknown, StatusDegraded, StatusDown}

// Rank is the precedence of a status: Down > Degraded > Unknown > Healthy.
func (s Status) Rank() int {
	switch s {
	case StatusHealthy:
		return 0
	case StatusDegraded:
		return 2
	case StatusDown:
		return 3
	default:
		return 1
	}
}

// Worse returns the worse of a and b by the rollup precedence.
func Worse(a, b Status) Status {
	if b.Rank() > a.Rank() {
		return b
	}
	return a
}

// Component names of node-local sources.
const (
	ComponentEtcd    = "etcd"
	ComponentDisk    = "disk"
	ComponentCilium  = "cilium"
	ComponentKubeOVN = "kube-ovn"
	ComponentLinstor = "linstor"
	ComponentNode    = "node"
)

// NodeComponents lists the node-local components, each with one Health object
// in the platform namespace.
var NodeComponents = []string{ComponentEtcd, ComponentDisk, ComponentCilium, ComponentKubeOVN, ComponentLinstor, ComponentNode}

// Reasons shared by more than one package.
const (
	// ReasonHeartbeatMissed: the node's agent has not delivered a valid report
	// within the heartbeat grace.
	ReasonHeartbeatMissed = "HeartbeatMissed"
	// ReasonAgentSilent: the node's agent is past its heartbeat grace while
	// the node's kubelet still renews its Lease in kube-node-lease: the
	// node is up, the agent's pod (or its path to this replica) is the
	// problem.
	ReasonAgentSilent = "AgentSilent"
	// ReasonNodeUnreachable: neither the agent nor the kubelet (its Lease
	// expired) is heard: the node is down or cut off.
	ReasonNodeUnreachable = "NodeUnreachable"
	// ReasonManyNodesSilent: the node is one of many that fell silent
	// within one window: one event on the observer's path (or a zone),
	// not that many dead nodes.
	ReasonManyNodesSilent = "ManyNodesSilent"
	// ReasonPlannedMaintenance: the node is cordoned (a drain, Talos'
	// upgrade, shutdown or reset); set on its node entries that are
	// Unknown or Down. The conditions keep the facts.
	ReasonPlannedMaintenance = "PlannedMaintenance"
	// ReasonCheckTimeout: a check ran past its deadline.
	ReasonCheckTimeout = "CheckTimeout"
	// ReasonCheckFailed: a check returned an error.
	ReasonCheckFailed = "CheckFailed"
	// ReasonCheckPanicked: a check panicked.
	ReasonCheckPanicked = "CheckPanicked"
	// ReasonNoData: no source reported this component.
	ReasonNoData = "NoData"
	// ReasonInputMissing: a file or socket the check reads (a client
	// certificate, the talosconfig, a unix socket) is not on the node; the
	// message names it and what to mount. The check recovers by itself when
	// it appears.
	ReasonInputMissing = "InputMissing"
	// ReasonInputUnreadable: such an input is there but cannot be read or
	// parsed (permissions, a half-written or malformed file).
	ReasonInputUnreadable = "InputUnreadable"
)

// ResourceRef points at the resource an observation is about.
type ResourceRef struct {
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
}

// Observation is one check's verdict on one thing on a node.
type Observation struct {
	// Component is one of the Component* names.
	Component string `json:"component"`
	// Check is the name of the check that produced the observation.
	Check string `json:"check"`
	// Status is the verdict.
	Status Status `json:"-"`
	// Reason is a CamelCase, machine-readable reason.
	Reason string `json:"reason"`
	// Message is for people; never parsed.
	Message string `json:"message"`
	// ResourceRef pins the observation to a resource, if any.
	ResourceRef *ResourceRef `json:"resourceRef,omitempty"`
	// Attributes are numeric facts (p99 seconds, db bytes, member counts...).
	Attributes map[string]float64 `json:"attributes,omitempty"`
}

// NodeReport is what one agent observed on its node in one interval.
type NodeReport struct {
	// NodeName is the node the report speaks for.
	NodeName string
	// AgentInstanceID is random per agent process start.
	AgentInstanceID string
	// Sequence is strictly increasing within one agent instance.
	Sequence uint64
	// SentAt is when the agent sent the report.
	SentAt time.Time
	// Interval is the agent's report interval.
	Interval time.Duration
	// AgentVersion is the agent's build version.
	AgentVersion string
	// Observations are the checks' verdicts.
	Observations []Observation
}

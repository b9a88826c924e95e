// Package status is the aggregator's one vocabulary of desired status: what
// a Health object should say (Component, its NodeState entries and
// Conditions, a backup condition's BackupFacts), whoever decides it (the
// rollup for the node-local components, the cluster adapters for the
// others) and whoever publishes it (the writer as Health objects, the
// metrics as series), through one Publisher.
//
// It is a leaf: it imports nothing of the aggregator's, only pkg/report,
// so a cluster adapter reads the vocabulary without the rollup, as Talos
// keeps its resource types apart from the controllers that fill them.
package status

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cozystack/cozy-health/pkg/report"
)

// MaxMessage is the longest message the aggregator writes for one condition
// or node state (Truncate).
const MaxMessage = 256

// Truncate shortens s to MaxMessage bytes (report.Truncate).
func Truncate(s string) string { return report.Truncate(s, MaxMessage) }

// Component is the desired status of one Health object: one component in
// one namespace.
type Component struct {
	Component  string               `json:"component"`
	Overall    report.Status        `json:"overall"`
	Reason     string               `json:"reason"`
	ObservedAt time.Time            `json:"observedAt"`
	FreshUntil time.Time            `json:"freshUntil"`
	Nodes      map[string]NodeState `json:"nodes,omitempty"`
	Conditions []Condition          `json:"conditions,omitempty"`
	// DegradedNodes and Issues are filled by the rollup's compaction (the
	// adapters fill Issues).
	DegradedNodes []string `json:"degradedNodes,omitempty"`
	Issues        int      `json:"issues"`
	// Source is who decides the object: the rollup (a node-local
	// component, with node entries) or the cluster adapters.
	Source Source `json:"source,omitempty"`
	// MaxAge, when positive, is the object's backup SLA, written as
	// spec.sla.maxAge (an adapters' backups object).
	MaxAge time.Duration `json:"maxAge,omitempty"`
}

// Source is who decides a Component.
type Source uint8

const (
	// FromRollup: a node-local component, rolled up from the agents'
	// reports, in the platform namespace.
	FromRollup Source = iota
	// FromAdapters: a component the cluster adapters judge from the
	// Kubernetes API, in the namespace of the facts' scope.
	FromAdapters
)

// NodeState is a component's state on one node.
type NodeState struct {
	Status       report.Status `json:"status"`
	Reason       string        `json:"reason,omitempty"`
	Message      string        `json:"message,omitempty"`
	LastReportAt time.Time     `json:"lastReportAt"`
}

// Condition is one fact about a component. Node is the node it is pinned to
// (ResourceRef{Kind: Node, Name: Node}); empty for component-level facts.
type Condition struct {
	Type string `json:"type"`
	// Severity is the status behind the condition; ConditionStatus derives
	// True/False/Unknown from it.
	Severity report.Status `json:"severity"`
	Reason   string        `json:"reason,omitempty"`
	Message  string        `json:"message,omitempty"`
	Node     string        `json:"node,omitempty"`
	// Resource, when set, pins the condition to a resource other than the
	// node (a DRBD resource, a block device) observed on Node.
	Resource       *report.ResourceRef `json:"resource,omitempty"`
	LastTransition time.Time           `json:"lastTransition,omitzero"`
	// Backup carries the typed backup fields of a backup condition (cluster
	// adapters only); nil for every other condition.
	Backup *BackupFacts `json:"backup,omitempty"`
}

// ResourceKey names a condition's resource for keys and sorting; empty for
// conditions pinned to a node or to nothing.
func (c Condition) ResourceKey() string {
	if c.Resource == nil {
		return ""
	}
	return c.Resource.Kind + "/" + c.Resource.Namespace + "/" + c.Resource.Name
}

// ConditionStatus is True (good), False (bad) or Unknown (no data).
func (c Condition) ConditionStatus() metav1.ConditionStatus {
	switch c.Severity {
	case report.StatusHealthy:
		return metav1.ConditionTrue
	case report.StatusUnknown:
		return metav1.ConditionUnknown
	default:
		return metav1.ConditionFalse
	}
}

// BackupFacts are the typed fields of a backup condition
// (HealthCondition.lastSuccessfulAt, maxAge, observedAge).
type BackupFacts struct {
	// LastSuccessfulAt is when the last successful backup ended; zero when
	// none ever succeeded.
	LastSuccessfulAt time.Time `json:"lastSuccessfulAt,omitzero"`
	// MaxAge is the largest age still judged Healthy; zero when neither an
	// SLA nor a schedule gives one.
	MaxAge time.Duration `json:"maxAge,omitempty"`
	// ObservedAge is the age of the last successful backup at ObservedAt of
	// the component; zero when none ever succeeded.
	ObservedAge time.Duration `json:"observedAge,omitempty"`
}

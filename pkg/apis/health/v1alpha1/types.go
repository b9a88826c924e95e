package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Status is the health of a component, a node's share of it, or a check.
// The precedence used by every rollup is Down > Degraded > Unknown > Healthy.
//
// +kubebuilder:validation:Enum=Healthy;Degraded;Down;Unknown
type Status string

// The four statuses a Health object can carry.
const (
	StatusHealthy  Status = "Healthy"
	StatusDegraded Status = "Degraded"
	StatusDown     Status = "Down"
	StatusUnknown  Status = "Unknown"
)

// Health is the health of one component in one scope. The namespace is the
// scope (cozy-system for the platform, tenant-* for a tenant) and the name is
// the component. Past status.freshUntil every consumer must read the object
// as Unknown.
//
// +genclient
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=chz,categories=cozystack;health
// +kubebuilder:validation:XValidation:rule="self.metadata.name == self.spec.component",message="metadata.name must equal spec.component"
// +kubebuilder:printcolumn:name="OVERALL",type=string,JSONPath=`.status.overall`,description="Rollup of every source: Healthy, Degraded, Down or Unknown"
// +kubebuilder:printcolumn:name="DEGRADED-NODES",type=string,JSONPath=`.status.degradedNodes`,description="Nodes whose state is not Healthy"
// +kubebuilder:printcolumn:name="ISSUES",type=integer,JSONPath=`.status.issues`,description="Number of conditions with status False"
// +kubebuilder:printcolumn:name="FRESH-UNTIL",type=string,JSONPath=`.status.freshUntil`,description="Past this instant the object must be read as Unknown"
// +kubebuilder:printcolumn:name="AGE",type=date,JSONPath=`.metadata.creationTimestamp`
type Health struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec says which component this object describes and the thresholds it is
	// judged against. Written by the aggregator from its configuration.
	Spec HealthSpec `json:"spec"`

	// Status is the observed health, written only by the aggregator through
	// the status subresource.
	// +optional
	Status HealthStatus `json:"status,omitempty"`
}

// HealthSpec names the component and its service-level thresholds.
type HealthSpec struct {
	// Component is the component this object describes (etcd, disk, cilium,
	// kube-ovn, linstor, node, platform, backups, control-plane, ...). It
	// cannot be changed after creation.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.component is immutable"
	Component string `json:"component"`

	// SLA holds the thresholds the component is judged against.
	// +optional
	SLA *HealthSLA `json:"sla,omitempty"`
}

// HealthSLA holds per-component thresholds.
type HealthSLA struct {
	// MaxAge is the largest age of the last successful backup that is still
	// Healthy.
	// +optional
	MaxAge *metav1.Duration `json:"maxAge,omitempty"`

	// FreshFor is how long after observedAt the status stays trustworthy; the
	// writer derives freshUntil from it.
	// +optional
	FreshFor *metav1.Duration `json:"freshFor,omitempty"`

	// Thresholds are named numeric thresholds of the component's checks, as
	// decimal strings (for example "walFsyncP99DegradedSeconds": "0.5").
	// +optional
	Thresholds map[string]string `json:"thresholds,omitempty"`
}

// HealthStatus is the observed health of a component.
type HealthStatus struct {
	// Overall is the rollup of every source of this component.
	// +optional
	Overall Status `json:"overall,omitempty"`

	// ObservedAt is when the facts behind this status were last observed.
	// +optional
	ObservedAt *metav1.Time `json:"observedAt,omitempty"`

	// FreshUntil is the instant past which every consumer must read Overall
	// as Unknown, whatever it says.
	// +optional
	FreshUntil *metav1.Time `json:"freshUntil,omitempty"`

	// Nodes is this component's state on each node, for node-local components.
	// Atomic for server-side apply: one writer owns the whole map, so the
	// apiserver tracks one field instead of one per node (at 5,000 nodes
	// that is most of the cost of every status apply).
	// +optional
	// +mapType=atomic
	Nodes map[string]NodeState `json:"nodes,omitempty"`

	// DegradedNodes lists, comma-separated and sorted, the nodes whose state
	// is not Healthy. Empty when every node is Healthy.
	// +optional
	DegradedNodes string `json:"degradedNodes,omitempty"`

	// Issues is the number of conditions whose status is False.
	// +optional
	Issues int32 `json:"issues,omitempty"`

	// Conditions are the individual facts behind Overall. Status True is good,
	// False is bad, Unknown means there is no data. Several conditions may
	// share a type when they pin different resources.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8192
	Conditions []HealthCondition `json:"conditions,omitempty"`
}

// NodeState is a component's state on one node.
type NodeState struct {
	// Status is the worst status of this component's checks on the node.
	Status Status `json:"status"`

	// Reason is a CamelCase reason for Status, for example HeartbeatMissed.
	// +optional
	Reason string `json:"reason,omitempty"`

	// Message is a human-readable explanation. Never parse it.
	// +optional
	Message string `json:"message,omitempty"`

	// LastReportAt is when the node's agent last delivered a valid report.
	// It is set when the node missed its heartbeat (reason HeartbeatMissed);
	// a node with a fresh report was heard within the heartbeat grace of
	// observedAt.
	// +optional
	LastReportAt *metav1.Time `json:"lastReportAt,omitempty"`
}

// ConditionStatus is the polarity of a condition: True is good, False is
// bad, Unknown means no data.
//
// +kubebuilder:validation:Enum=True;False;Unknown
type ConditionStatus string

// The three condition statuses.
const (
	ConditionTrue    ConditionStatus = "True"
	ConditionFalse   ConditionStatus = "False"
	ConditionUnknown ConditionStatus = "Unknown"
)

// HealthCondition is one fact about the component, optionally pinned to a
// resource (a Node, a LINSTOR resource, a backup).
type HealthCondition struct {
	// Type is the CamelCase kind of fact, for example FsyncLatency or Quorum.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=316
	// +kubebuilder:validation:Pattern=`^[A-Z][A-Za-z0-9]*$`
	Type string `json:"type"`

	// Status is True when good, False when bad, Unknown when there is no data.
	Status ConditionStatus `json:"status"`

	// Reason is a CamelCase, machine-readable reason.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`

	// Message is a human-readable explanation. Consumers never parse it.
	// +optional
	// +kubebuilder:validation:MaxLength=32768
	Message string `json:"message,omitempty"`

	// ResourceRef pins the condition to the resource it is about.
	// +optional
	ResourceRef *ResourceRef `json:"resourceRef,omitempty"`

	// LastTransitionTime is when Status last changed.
	// +optional
	LastTransitionTime metav1.Time `json:"lastTransitionTime,omitempty"`

	// LastSuccessfulAt is, for backups, when the last successful backup ended.
	// +optional
	LastSuccessfulAt *metav1.Time `json:"lastSuccessfulAt,omitempty"`

	// MaxAge is, for backups, the largest age still judged Healthy.
	// +optional
	MaxAge *metav1.Duration `json:"maxAge,omitempty"`

	// ObservedAge is, for backups, the age of the last successful backup when
	// it was observed.
	// +optional
	ObservedAge *metav1.Duration `json:"observedAge,omitempty"`
}

// ResourceRef points at the resource a condition is about.
type ResourceRef struct {
	// Kind of the resource, for example Node or Resource (LINSTOR).
	// +kubebuilder:validation:MinLength=1
	Kind string `json:"kind"`

	// Name of the resource.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`

	// Namespace of the resource, when it is namespaced.
	// +optional
	Namespace string `json:"namespace,omitempty"`
}

// HealthList is a list of Health objects.
//
// +kubebuilder:object:root=true
type HealthList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	// Items are the Health objects.
	Items []Health `json:"items"`
}

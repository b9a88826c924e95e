package status

import "github.com/cozystack/cozy-health/pkg/report"

// Publisher receives the desired status of Health objects: the writer
// writes it (while leading), the metrics export it (on every replica).
// The rollup engine and the adapters' manager each hand what they decide
// to one Publisher, so every sink sees the same desired state the same way
// (node-problem-detector's exporter interface).
//
// A Publisher keeps cs: the caller does not modify it once published.
type Publisher interface {
	// Publish records the desired status of the object namespace/cs.Component.
	Publish(namespace string, cs *Component)
	// Retime records a status that differs from the last one published
	// for its object only in ObservedAt and FreshUntil: nothing a reader
	// judges changed, so it is carried by the next refresh, not a write.
	Retime(namespace string, cs *Component)
	// Remove withdraws an object whose last fact went away.
	Remove(namespace, component string)
}

// Publishers hands everything to each of its Publishers in order.
type Publishers []Publisher

var _ Publisher = Publishers(nil)

// Publish implements Publisher.
func (ps Publishers) Publish(namespace string, cs *Component) {
	for _, p := range ps {
		p.Publish(namespace, cs)
	}
}

// Retime implements Publisher.
func (ps Publishers) Retime(namespace string, cs *Component) {
	for _, p := range ps {
		p.Retime(namespace, cs)
	}
}

// Remove implements Publisher.
func (ps Publishers) Remove(namespace, component string) {
	for _, p := range ps {
		p.Remove(namespace, component)
	}
}

// Issue is one published condition that is not True: what an alert needs
// to name the component, the node, the resource and the reason without
// reading the Health object (cozy_health_issue).
type Issue struct {
	// Node is the node the condition is pinned to; empty for
	// component-level conditions (Quorum, Data, the per-type summaries).
	Node string
	// Kind and Resource name the resource other than the node the
	// condition is pinned to (Resource pvc-1, Cluster.postgresql.cnpg.io db,
	// Schedule.velero.io db); empty otherwise. Two resources of one name in
	// one scope are two series.
	Kind     string
	Resource string
	Type     string
	Reason   string
	// Status is the condition's severity: Degraded, Down or Unknown.
	Status report.Status
}

// IssuesOf lists the conditions of cs that are not True.
func IssuesOf(cs *Component) []Issue {
	var out []Issue
	for _, c := range cs.Conditions {
		if c.Severity == report.StatusHealthy {
			continue
		}
		is := Issue{Node: c.Node, Type: c.Type, Reason: c.Reason, Status: c.Severity}
		if c.Resource != nil {
			is.Kind, is.Resource = c.Resource.Kind, c.Resource.Name
		}
		out = append(out, is)
	}
	return out
}

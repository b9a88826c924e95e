package writer

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cozystack/cozy-health/aggregator/internal/status"
	healthv1alpha1 "github.com/cozystack/cozy-health/pkg/apis/health/v1alpha1"
	ac "github.com/cozystack/cozy-health/pkg/applyconfiguration/health/v1alpha1"
	"github.com/cozystack/cozy-health/pkg/report"
)

// The one domain -> Kubernetes conversion point of the aggregator.

func apiStatus(s report.Status) healthv1alpha1.Status {
	return healthv1alpha1.Status(s.String())
}

// specApply is the object with its spec, applied when the object may be
// missing.
func specApply(namespace, component string, freshFor metav1.Duration) *ac.HealthApplyConfiguration {
	return ac.Health(component, namespace).
		WithSpec(ac.HealthSpec().WithComponent(component).WithSLA(ac.HealthSLA().WithFreshFor(freshFor)))
}

// adapterSpecApply is an adapter object's spec, labelled as the adapters'
// (so a later leader prunes it when no adapter publishes it), with its
// backup SLA when one is configured.
func adapterSpecApply(namespace, component string, freshFor metav1.Duration, maxAge time.Duration) *ac.HealthApplyConfiguration {
	sla := ac.HealthSLA().WithFreshFor(freshFor)
	if maxAge > 0 {
		sla.WithMaxAge(metav1.Duration{Duration: maxAge})
	}
	return ac.Health(component, namespace).
		WithLabels(map[string]string{SourceLabel: SourceAdapters}).
		WithSpec(ac.HealthSpec().WithComponent(component).WithSLA(sla))
}

// statusApply is the status of cs as an apply configuration.
func statusApply(namespace string, cs *status.Component) *ac.HealthApplyConfiguration {
	st := ac.HealthStatus().
		WithOverall(apiStatus(cs.Overall)).
		WithObservedAt(metav1.NewTime(cs.ObservedAt.UTC().Truncate(0))).
		WithFreshUntil(metav1.NewTime(cs.FreshUntil)).
		WithIssues(int32(cs.Issues)).
		WithDegradedNodes(joinSorted(cs.DegradedNodes))
	nodes := make(map[string]ac.NodeStateApplyConfiguration, len(cs.Nodes))
	for name, ns := range cs.Nodes {
		n := ac.NodeState().WithStatus(apiStatus(ns.Status))
		if ns.Reason != "" {
			n.WithReason(ns.Reason)
		}
		if ns.Message != "" {
			n.WithMessage(ns.Message)
		}
		// The rollup sets lastReportAt only for a node that missed its
		// heartbeat (when was it last heard); a fresh node's time is the
		// metric cozy_health_node_last_report_timestamp_seconds. Leaving it
		// out keeps a 5,000-node object (and its managedFields) about 40 %
		// smaller and unchanged between refreshes.
		if !ns.LastReportAt.IsZero() {
			n.WithLastReportAt(metav1.NewTime(ns.LastReportAt))
		}
		nodes[name] = *n
	}
	if len(nodes) > 0 {
		st.WithNodes(nodes)
	}
	conds := make([]*ac.HealthConditionApplyConfiguration, 0, len(cs.Conditions))
	for _, c := range cs.Conditions {
		hc := ac.HealthCondition().
			WithType(c.Type).
			WithStatus(healthv1alpha1.ConditionStatus(c.ConditionStatus())).
			WithLastTransitionTime(metav1.NewTime(c.LastTransition))
		if c.Reason != "" {
			hc.WithReason(c.Reason)
		}
		if c.Message != "" {
			hc.WithMessage(c.Message)
		}
		if b := c.Backup; b != nil {
			if !b.LastSuccessfulAt.IsZero() {
				hc.WithLastSuccessfulAt(metav1.NewTime(b.LastSuccessfulAt.UTC().Truncate(time.Second)))
				hc.WithObservedAge(metav1.Duration{Duration: b.ObservedAge.Truncate(time.Second)})
			}
			if b.MaxAge > 0 {
				hc.WithMaxAge(metav1.Duration{Duration: b.MaxAge})
			}
		}
		switch {
		case c.Resource != nil:
			ref := ac.ResourceRef().WithKind(c.Resource.Kind).WithName(c.Resource.Name)
			if c.Resource.Namespace != "" {
				ref.WithNamespace(c.Resource.Namespace)
			}
			hc.WithResourceRef(ref)
		case c.Node != "":
			hc.WithResourceRef(ac.ResourceRef().WithKind(report.KindNode).WithName(c.Node))
		}
		conds = append(conds, hc)
	}
	st.WithConditions(conds...)
	return ac.Health(cs.Component, namespace).WithStatus(st)
}

func joinSorted(names []string) string {
	n := 0
	for _, s := range names {
		n += len(s) + 1
	}
	b := make([]byte, 0, n)
	for i, s := range names {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, s...)
	}
	return string(b)
}

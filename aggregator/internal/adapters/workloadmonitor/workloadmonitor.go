// Package workloadmonitor judges Cozystack's per-application readiness,
// WorkloadMonitors (cozystack.io/v1alpha1): status.operational false (fewer
// available replicas than spec.minReplicas) is Down, operational with
// fewer available than spec.replicas is Degraded, no status is Unknown.
// Each monitor that is not fully available gets a Workload condition
// pinned to it; the object's Workloads condition counts them. Monitors in
// a tenant namespace land in its apps object, others in platform.
package workloadmonitor

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/cozystack/cozy-health/aggregator/internal/adapterkit"
	"github.com/cozystack/cozy-health/aggregator/internal/status"
	"github.com/cozystack/cozy-health/pkg/report"
)

// Source is the watched resource.
var Source = adapterkit.Source{
	GVR:  schema.GroupVersionResource{Group: "cozystack.io", Version: "v1alpha1", Resource: "workloadmonitors"},
	Kind: "WorkloadMonitor", Project: project,
}

// Condition types and reasons.
const (
	TypeWorkload   = "Workload"
	TypeWorkloads  = "Workloads"
	ReasonNotOp    = "NotOperational"
	ReasonReduced  = "ReplicasUnavailable"
	ReasonNoStatus = "NoStatus"
	ReasonAll      = "AllOperational"
	ReasonSome     = "WorkloadsNotOperational"
)

// Adapter is the WorkloadMonitor adapter.
type Adapter struct{}

var _ adapterkit.Adapter = Adapter{}

// New returns the adapter.
func New() Adapter { return Adapter{} }

// Name implements adapterkit.Adapter.
func (Adapter) Name() string { return "workloadmonitor" }

// Component implements adapterkit.Adapter.
func (Adapter) Component() string { return adapterkit.ComponentPlatform }

// Sources implements adapterkit.Adapter.
func (Adapter) Sources() []adapterkit.Source { return []adapterkit.Source{Source} }

type monitor struct {
	kind                         string
	operational, hasOperational  bool
	available, replicas, minimum int64
}

func project(u *unstructured.Unstructured) any {
	m := &monitor{kind: adapterkit.String(u, "spec", "kind")}
	m.operational, m.hasOperational = adapterkit.Bool(u, "status", "operational")
	m.available = adapterkit.Int(u, "status", "availableReplicas")
	m.replicas = adapterkit.Int(u, "spec", "replicas")
	m.minimum = adapterkit.Int(u, "spec", "minReplicas")
	if m.replicas == 0 {
		m.replicas = adapterkit.Int(u, "status", "observedReplicas")
	}
	return m
}

// Judge implements adapterkit.Adapter.
func (Adapter) Judge(in *adapterkit.Input) []adapterkit.Finding {
	type tally struct {
		total, ok int
		worst     report.Status
		comp      string
	}
	tallies := map[string]*tally{}
	var out []adapterkit.Finding
	for _, o := range in.List(Source.GVR) {
		m, ok := o.Data.(*monitor)
		if !ok {
			continue
		}
		scope, comp := in.AppsScope(o.Namespace)
		t := tallies[scope]
		if t == nil {
			t = &tally{worst: report.StatusHealthy, comp: comp}
			tallies[scope] = t
		}
		t.total++
		c := status.Condition{Type: TypeWorkload, Resource: adapterkit.Ref(Source, o.Namespace, o.Name),
			Message: fmt.Sprintf("%d of %d replicas available (minimum %d)", m.available, m.replicas, m.minimum)}
		switch {
		case !m.hasOperational:
			c.Severity, c.Reason, c.Message = report.StatusUnknown, ReasonNoStatus, "the monitor has not reported yet"
		case !m.operational:
			c.Severity, c.Reason = report.StatusDown, ReasonNotOp
		case m.available < m.replicas:
			c.Severity, c.Reason = report.StatusDegraded, ReasonReduced
		default:
			t.ok++
			continue
		}
		t.worst = report.Worse(t.worst, c.Severity)
		out = append(out, adapterkit.Finding{Namespace: scope, Component: comp, Condition: c})
	}
	for scope, t := range tallies {
		c := status.Condition{Type: TypeWorkloads, Severity: t.worst, Reason: ReasonAll,
			Message: fmt.Sprintf("%d of %d workloads fully available", t.ok, t.total)}
		if t.ok < t.total {
			c.Reason = ReasonSome
		}
		out = append(out, adapterkit.Finding{Namespace: scope, Component: t.comp, Condition: c})
	}
	return out
}

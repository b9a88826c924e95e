package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cozystack/cozy-health/aggregator/internal/status"
	"github.com/cozystack/cozy-health/pkg/report"
)

// maintenance holds the series the alert rules hold pages with during
// planned maintenance (issue 36): which nodes are in maintenance within
// their window, and which components are not Healthy only because of
// such nodes. Facts are never changed by them: the Health objects and
// every other series say what is true; only the pages wait.
type maintenance struct {
	node    *prometheus.GaugeVec
	overdue *prometheus.GaugeVec
	held    *prometheus.GaugeVec

	mu sync.Mutex
	// inWindow: node -> whether its maintenance is still within its
	// window; a node absent is not in maintenance.
	inWindow map[string]bool
	// nodes seen: every node of the state has both series (0 when not in
	// maintenance), so the rules' selectors always match a series.
	known map[string]bool
	// nodes and overall are the last published node states and overall
	// status of each node-local component (namespace/component).
	nodes   map[[2]string]map[string]report.Status
	overall map[[2]string]report.Status
}

func newMaintenance() *maintenance {
	return &maintenance{
		node: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cozy_health_node_maintenance",
			Help: "1 while the node is in planned maintenance (cordoned: a drain, or Talos shutting down, upgrading or resetting it) within the maintenance window (--maintenance-window): its node-level alerts hold. 0 otherwise, a maintenance that outlasted its window included.",
		}, []string{"node"}),
		overdue: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cozy_health_node_maintenance_overdue",
			Help: "1 while the node is still in planned maintenance (cordoned) past the maintenance window (--maintenance-window); 0 otherwise.",
		}, []string{"node"}),
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cozy_health_component_maintenance",
			Help: "1 while the node-local component is Degraded or Unknown only because of nodes in maintenance within their window (every node entry that is not Healthy is such a node's): its Degraded and Unknown alerts hold. Down is never held.",
		}, []string{"namespace", "component"}),
		inWindow: map[string]bool{},
		known:    map[string]bool{},
		nodes:    map[[2]string]map[string]report.Status{},
		overall:  map[[2]string]report.Status{},
	}
}

// SetMaintenance replaces the set of nodes in maintenance: node -> whether
// it is still within its window; all lists every node of the state (each
// exports both series, 0 when not in maintenance). Components are judged
// held again.
func (m *Metrics) SetMaintenance(all []string, nodes map[string]bool) {
	mt := m.maintenance
	mt.mu.Lock()
	defer mt.mu.Unlock()
	next := make(map[string]bool, len(all))
	for _, n := range all {
		next[n] = true
	}
	for n := range nodes {
		next[n] = true
	}
	for n := range mt.known {
		if !next[n] {
			mt.node.DeleteLabelValues(n)
			mt.overdue.DeleteLabelValues(n)
		}
	}
	mt.known = next
	mt.inWindow = make(map[string]bool, len(nodes))
	for n := range next {
		in, cordoned := nodes[n]
		if cordoned {
			mt.inWindow[n] = in
		}
		mt.node.WithLabelValues(n).Set(boolValue(cordoned && in))
		mt.overdue.WithLabelValues(n).Set(boolValue(cordoned && !in))
	}
	for k := range mt.overall {
		mt.judge(k)
	}
}

// published records a node-local component's published status.
func (mt *maintenance) published(namespace string, cs *status.Component) {
	k := [2]string{namespace, cs.Component}
	nodes := make(map[string]report.Status, len(cs.Nodes))
	for n, ns := range cs.Nodes {
		nodes[n] = ns.Status
	}
	mt.mu.Lock()
	defer mt.mu.Unlock()
	mt.nodes[k], mt.overall[k] = nodes, cs.Overall
	mt.judge(k)
}

// removed drops a node's series at once (it left the state), before the
// next SetMaintenance would.
func (mt *maintenance) removed(node string) {
	mt.mu.Lock()
	defer mt.mu.Unlock()
	delete(mt.known, node)
	delete(mt.inWindow, node)
	mt.node.DeleteLabelValues(node)
	mt.overdue.DeleteLabelValues(node)
}

// removedComponent forgets a component.
func (mt *maintenance) removedComponent(namespace, component string) {
	k := [2]string{namespace, component}
	mt.mu.Lock()
	defer mt.mu.Unlock()
	delete(mt.nodes, k)
	delete(mt.overall, k)
	mt.held.DeleteLabelValues(namespace, component)
}

// judge sets k's held series; mt.mu is held.
func (mt *maintenance) judge(k [2]string) {
	mt.held.WithLabelValues(k[0], k[1]).Set(boolValue(Held(mt.overall[k], mt.nodes[k], mt.inWindow)))
}

// Held tells whether a node-local component of overall status overall and
// node states nodes is Degraded or Unknown only because of nodes in
// maintenance within their window (inWindow[node] true): at least one
// node is not Healthy, and every such node is one of them. Down (all nodes
// down, or a quorum lost) is never held.
func Held(overall report.Status, nodes map[string]report.Status, inWindow map[string]bool) bool {
	if overall != report.StatusDegraded && overall != report.StatusUnknown {
		return false
	}
	found := false
	for n, s := range nodes {
		if s == report.StatusHealthy {
			continue
		}
		if !inWindow[n] {
			return false
		}
		found = true
	}
	return found
}

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
	node *prometheus.GaugeVec
	held *prometheus.GaugeVec

	mu sync.Mutex
	// inWindow: node -> whether its maintenance is still within its
	// window; a node absent is not in maintenance.
	inWindow map[string]bool
	// nodes and overall are the last published node states and overall
	// status of each node-local component (namespace/component).
	nodes   map[[2]string]map[string]report.Status
	overall map[[2]string]report.Status
}

func newMaintenance() *maintenance {
	return &maintenance{
		node: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cozy_health_node_maintenance",
			Help: "Present while the node is in planned maintenance (cordoned: a drain, or Talos shutting down, upgrading or resetting it): 1 within the maintenance window (--maintenance-window), while its node-level alerts hold; 0 once the maintenance outlasted it.",
		}, []string{"node"}),
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cozy_health_component_maintenance",
			Help: "1 while the node-local component is Degraded or Unknown only because of nodes in maintenance within their window (every node entry that is not Healthy is such a node's): its Degraded and Unknown alerts hold. Down is never held.",
		}, []string{"namespace", "component"}),
		inWindow: map[string]bool{},
		nodes:    map[[2]string]map[string]report.Status{},
		overall:  map[[2]string]report.Status{},
	}
}

// SetMaintenance replaces the set of nodes in maintenance: node -> whether
// it is still within its window. Components are judged held again.
func (m *Metrics) SetMaintenance(nodes map[string]bool) {
	mt := m.maintenance
	mt.mu.Lock()
	defer mt.mu.Unlock()
	for n := range mt.inWindow {
		if _, ok := nodes[n]; !ok {
			mt.node.DeleteLabelValues(n)
		}
	}
	mt.inWindow = make(map[string]bool, len(nodes))
	for n, in := range nodes {
		mt.inWindow[n] = in
		mt.node.WithLabelValues(n).Set(boolValue(in))
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

// removed forgets a component.
func (mt *maintenance) removed(namespace, component string) {
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

package metrics

import (
	"sort"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cozystack/cozy-health/pkg/report"
)

// Issue is one published condition that is not True: what an alert needs
// to name the component, the node, the resource and the reason without
// reading the Health object.
type Issue struct {
	// Node is the node the condition is pinned to; empty for
	// component-level conditions (Quorum, Data, the per-type summaries).
	Node string
	// Kind and Resource name the resource other than the node the
	// condition is pinned to (Resource pvc-1, Cluster.postgresql.cnpg.io db,
	// Schedule.velero.io db); empty otherwise. Two resources of one name in one scope
	// are two series.
	Kind     string
	Resource string
	Type     string
	Reason   string
	// Status is the condition's severity: Degraded, Down or Unknown.
	Status report.Status
}

// issueTable is the collector of cozy_health_issue: one series per
// published condition that is not True, replaced as a whole per namespace
// and component when the rollup (or an adapter) publishes it again. The published conditions are compacted
// (at most rollup.DefaultMaxListed node conditions per component), so the
// series stay bounded however many nodes fail. A scrape sees either the
// old or the new set of a component, never a gap between them, so an
// alert's pending state survives a republish.
type issueTable struct {
	desc *prometheus.Desc
	// mu guards byComponent, keyed by namespace + "/" + component.
	mu          sync.RWMutex
	byComponent map[string][]prometheus.Metric
}

func newIssueTable() *issueTable {
	return &issueTable{
		desc: prometheus.NewDesc("cozy_health_issue",
			"1 for every published condition that is not True (status is its severity: Degraded, Down or Unknown), with the node and the resource (kind, name) it is pinned to and its reason; node is empty for component-level conditions.",
			[]string{"namespace", "component", "node", "kind", "resource", "type", "reason", "status"}, nil),
		byComponent: map[string][]prometheus.Metric{},
	}
}

func (t *issueTable) publish(namespace, component string, issues []Issue) {
	series := make([]prometheus.Metric, 0, len(issues))
	seen := make(map[Issue]bool, len(issues))
	for _, is := range issues {
		if is.Status == report.StatusHealthy || seen[is] {
			continue
		}
		seen[is] = true
		series = append(series, prometheus.MustNewConstMetric(t.desc, prometheus.GaugeValue, 1,
			namespace, component, is.Node, is.Kind, is.Resource, is.Type, is.Reason, is.Status.String()))
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(series) == 0 {
		delete(t.byComponent, namespace+"/"+component)
		return
	}
	t.byComponent[namespace+"/"+component] = series
}

// Describe implements prometheus.Collector.
func (t *issueTable) Describe(ch chan<- *prometheus.Desc) { ch <- t.desc }

// Collect implements prometheus.Collector.
func (t *issueTable) Collect(ch chan<- prometheus.Metric) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	comps := make([]string, 0, len(t.byComponent))
	for c := range t.byComponent {
		comps = append(comps, c)
	}
	sort.Strings(comps)
	for _, c := range comps {
		for _, s := range t.byComponent[c] {
			ch <- s
		}
	}
}

package metrics

import (
	"sort"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cozystack/cozy-health/aggregator/internal/status"
	"github.com/cozystack/cozy-health/pkg/report"
)

// issueTable is the collector of cozy_health_issue: one series per
// published condition that is not True, replaced as a whole per namespace
// and component when the rollup (or an adapter) publishes it again. The published conditions are compacted
// (at most rollup.DefaultMaxListed node conditions per component), so the
// series stay bounded however many nodes fail. A scrape sees either the
// old or the new set of a component, never a gap between them, so an
// alert's pending state survives a republish.
//
// What one node's reports can put there is bounded too: at most
// MaxIssuesPerNode series per node and component, and at most
// MaxIssuesPerNamespace series per namespace (across its components), so a
// node naming thousands of resources, or new ones every report, cannot
// grow the scrape or churn the store's series without bound. What is left
// out is counted in cozy_health_issue_series_dropped{namespace,component}
// (the Health object still carries every condition).
type issueTable struct {
	desc, droppedDesc *prometheus.Desc
	// mu guards byComponent and dropped, keyed by namespace + "/" +
	// component, and perNamespace (series per namespace).
	mu           sync.RWMutex
	byComponent  map[string]issueSeries
	perNamespace map[string]int
}

// issueSeries is one component's exported series and how many it left out.
type issueSeries struct {
	namespace, component string
	series               []prometheus.Metric
	dropped              int
}

// Bounds of cozy_health_issue.
const (
	MaxIssuesPerNode      = 20
	MaxIssuesPerNamespace = 500
)

func newIssueTable() *issueTable {
	return &issueTable{
		desc: prometheus.NewDesc("cozy_health_issue",
			"1 for every published condition that is not True (status is its severity: Degraded, Down or Unknown), with the node and the resource (kind, name) it is pinned to and its reason; node is empty for component-level conditions.",
			[]string{"namespace", "component", "node", "kind", "resource", "type", "reason", "status"}, nil),
		droppedDesc: prometheus.NewDesc("cozy_health_issue_series_dropped",
			"Conditions that are not True left out of cozy_health_issue, per namespace and component: over 20 series of one node and component, or 500 of one namespace.",
			[]string{"namespace", "component"}, nil),
		byComponent:  map[string]issueSeries{},
		perNamespace: map[string]int{},
	}
}

func (t *issueTable) publish(namespace, component string, issues []status.Issue) {
	key := namespace + "/" + component
	t.mu.Lock()
	defer t.mu.Unlock()
	// The namespace's budget is what its other components do not use.
	budget := MaxIssuesPerNamespace - t.perNamespace[namespace] + len(t.byComponent[key].series)
	series := make([]prometheus.Metric, 0, min(len(issues), max(budget, 0)))
	seen := make(map[status.Issue]bool, len(issues))
	perNode := map[string]int{}
	dropped := 0
	for _, is := range issues {
		if is.Status == report.StatusHealthy || seen[is] {
			continue
		}
		seen[is] = true
		// Component-level conditions (no node) are the rollup's own: only
		// the namespace bound applies to them.
		if (is.Node != "" && perNode[is.Node] >= MaxIssuesPerNode) || len(series) >= budget {
			dropped++
			continue
		}
		perNode[is.Node]++
		series = append(series, prometheus.MustNewConstMetric(t.desc, prometheus.GaugeValue, 1,
			namespace, component, is.Node, is.Kind, is.Resource, is.Type, is.Reason, is.Status.String()))
	}
	t.perNamespace[namespace] += len(series) - len(t.byComponent[key].series)
	if t.perNamespace[namespace] <= 0 {
		delete(t.perNamespace, namespace)
	}
	if len(series) == 0 && dropped == 0 {
		delete(t.byComponent, key)
		return
	}
	t.byComponent[key] = issueSeries{namespace: namespace, component: component, series: series, dropped: dropped}
}

// Describe implements prometheus.Collector.
func (t *issueTable) Describe(ch chan<- *prometheus.Desc) { ch <- t.desc; ch <- t.droppedDesc }

// MetricTypes names the type of each metric Collect sends, which a gather
// shows only once an issue is published (pkg/reference.Typed).
func (t *issueTable) MetricTypes() map[*prometheus.Desc]prometheus.ValueType {
	return map[*prometheus.Desc]prometheus.ValueType{t.desc: prometheus.GaugeValue, t.droppedDesc: prometheus.GaugeValue}
}

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
		is := t.byComponent[c]
		for _, s := range is.series {
			ch <- s
		}
		if is.dropped > 0 {
			ch <- prometheus.MustNewConstMetric(t.droppedDesc, prometheus.GaugeValue, float64(is.dropped), is.namespace, is.component)
		}
	}
}

// Package metrics holds the aggregator's own Prometheus metrics. Values are
// computed when the state or the rollup changes, never per scrape: the
// rollup loop calls Publish, the state calls Accepted/Removed, the writer
// counts its writes. Label sets of a node disappear when the node leaves.
package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cozystack/cozy-health/pkg/report"
)

// Kinds of rollup (cozy_health_rollups_total): a full computation, or the
// last answer retimed because nothing it judges changed.
const (
	RollupFull    = "full"
	RollupRetimed = "retimed"
)

// Results of cozy_health_writes_total.
const (
	WriteSuccess = "success"
	WriteError   = "error"
)

// Metrics are the aggregator's metrics.
type Metrics struct {
	namespace string

	componentStatus *prometheus.GaugeVec
	nodeStatus      *prometheus.GaugeVec
	lastReport      *prometheus.GaugeVec
	writes          *prometheus.CounterVec
	leader          prometheus.Gauge
	rollupSeconds   prometheus.Histogram
	rollups         *prometheus.CounterVec
	writeSeconds    prometheus.Histogram

	// mu guards nodeStatusOf and lastReportOf.
	mu sync.Mutex
	// nodeStatusOf is the status currently exported per node and component,
	// so only its label set exists.
	nodeStatusOf map[string]map[string]report.Status
	// lastReportOf caches the per-node gauge so the report path does not
	// hash labels.
	lastReportOf map[string]prometheus.Gauge
	// exported counts, per component, the nodes with a node_status series.
	exported map[string]int
}

// New registers the metrics on reg. namespace is the platform namespace
// (the namespace label of cozy_health_component_status).
func New(reg prometheus.Registerer, namespace string) (*Metrics, error) {
	m := &Metrics{
		namespace: namespace,
		componentStatus: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cozy_health_component_status",
			Help: "1 for the component's current published overall status, 0 for the others.",
		}, []string{"namespace", "component", "status"}),
		nodeStatus: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cozy_health_node_status",
			Help: "1 for a component's current published status on a node; only the current status has a series (5,000 nodes x 6 components stay at 30,000 series).",
		}, []string{"node", "component", "status"}),
		lastReport: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cozy_health_node_last_report_timestamp_seconds",
			Help: "Unix time the node's last accepted report arrived.",
		}, []string{"node"}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cozy_health_writes_total",
			Help: "Health object status writes by result (success, error).",
		}, []string{"result"}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cozy_health_leader",
			Help: "1 while this replica holds the Lease and writes Health objects.",
		}),
		rollupSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "cozy_health_rollup_duration_seconds",
			Help:    "Time of one rollup of the whole state, full or retimed.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		rollups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cozy_health_rollups_total",
			Help: "Rollups by kind: full (recomputed) or retimed (nothing judged changed; only observedAt and freshUntil moved).",
		}, []string{"kind"}),
		writeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "cozy_health_write_duration_seconds",
			Help:    "Time of one Health status apply, successful or not.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
		}),
		nodeStatusOf: map[string]map[string]report.Status{},
		lastReportOf: map[string]prometheus.Gauge{},
		exported:     map[string]int{},
	}
	for _, c := range []prometheus.Collector{m.componentStatus, m.nodeStatus, m.lastReport, m.writes, m.leader, m.rollupSeconds, m.rollups, m.writeSeconds} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, r := range []string{WriteSuccess, WriteError} {
		m.writes.WithLabelValues(r)
	}
	for _, k := range []string{RollupFull, RollupRetimed} {
		m.rollups.WithLabelValues(k)
	}
	return m, nil
}

// Accepted records a node's report arrival.
func (m *Metrics) Accepted(node string, receivedAt time.Time) {
	m.mu.Lock()
	g, ok := m.lastReportOf[node]
	if !ok {
		g = m.lastReport.WithLabelValues(node)
		m.lastReportOf[node] = g
	}
	m.mu.Unlock()
	g.Set(float64(receivedAt.UnixNano()) / 1e9)
}

// Removed deletes every label set of a node that left the cluster.
func (m *Metrics) Removed(node string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.lastReportOf, node)
	m.lastReport.DeleteLabelValues(node)
	m.nodeStatus.DeletePartialMatch(prometheus.Labels{"node": node})
	for comp := range m.nodeStatusOf[node] {
		m.exported[comp]--
	}
	delete(m.nodeStatusOf, node)
}

// Publish exports a component's published overall status and node states.
// Only changed node states touch the registry.
func (m *Metrics) Publish(component string, overall report.Status, nodes map[string]report.Status) {
	for _, s := range report.Statuses {
		v := 0.0
		if s == overall {
			v = 1
		}
		m.componentStatus.WithLabelValues(m.namespace, component, s.String()).Set(v)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for node, s := range nodes {
		byComp := m.nodeStatusOf[node]
		if byComp == nil {
			byComp = map[string]report.Status{}
			m.nodeStatusOf[node] = byComp
		}
		prev, had := byComp[component]
		if had && prev == s {
			continue
		}
		if had {
			m.nodeStatus.DeleteLabelValues(node, component, prev.String())
		}
		m.nodeStatus.WithLabelValues(node, component, s.String()).Set(1)
		byComp[component] = s
		if !had {
			m.exported[component]++
		}
	}
	if m.exported[component] == len(nodes) {
		// Every exported node is still there (each was seen above).
		return
	}
	n := 0
	for node, byComp := range m.nodeStatusOf {
		if prev, had := byComp[component]; had {
			if _, still := nodes[node]; !still {
				m.nodeStatus.DeleteLabelValues(node, component, prev.String())
				delete(byComp, component)
				continue
			}
			n++
		}
	}
	m.exported[component] = n
}

// Write counts one Health status write and its duration.
func (m *Metrics) Write(result string, took time.Duration) {
	m.writes.WithLabelValues(result).Inc()
	m.writeSeconds.Observe(took.Seconds())
}

// SetLeader records whether this replica leads.
func (m *Metrics) SetLeader(leading bool) {
	if leading {
		m.leader.Set(1)
	} else {
		m.leader.Set(0)
	}
}

// ObserveRollup counts one rollup of kind (RollupFull, RollupRetimed) and
// records how long it took.
func (m *Metrics) ObserveRollup(kind string, d time.Duration) {
	m.rollups.WithLabelValues(kind).Inc()
	m.rollupSeconds.Observe(d.Seconds())
}

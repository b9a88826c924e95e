// Package metrics holds the aggregator's own Prometheus metrics. Values are
// computed when the state or the rollup changes, never per scrape: the
// rollup and the adapters publish to it (status.Publisher), the state
// calls Accepted/Removed, the writer
// counts its writes; a scrape only reads them. Label sets of a node
// disappear when the node leaves.
package metrics

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/cozystack/cozy-health/aggregator/internal/status"
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

// Reasons of cozy_health_writer_conditions_bounded_total: why the writer
// dropped or cut a condition outside the Health CRD's bounds.
const (
	BoundType        = "type"
	BoundResourceRef = "resource_ref"
	BoundReason      = "reason_truncated"
	BoundMessage     = "message_truncated"
	BoundMaxItems    = "max_items"
	BoundSize        = "object_size"
)

// BoundReasons lists them; each is pre-initialised to 0.
var BoundReasons = []string{BoundType, BoundResourceRef, BoundReason, BoundMessage, BoundMaxItems, BoundSize}

// Reasons of cozy_health_writer_node_entries_bounded_total: what the writer
// left out of status.nodes entries (or status.degradedNodes) so that an
// object of many nodes that are not Healthy stays under etcd's request
// limit. Every node keeps its entry, its status and its reason.
const (
	BoundNodeMessage       = "message"
	BoundNodeLastReportAt  = "last_report_at"
	BoundNodeDegradedNodes = "degraded_nodes"
	// BoundNodeOverLimit: even status and reason alone are over the
	// budget; the write is attempted whole and the apiserver may refuse it.
	BoundNodeOverLimit = "over_limit"
)

// NodeBoundReasons lists them; each is pre-initialised to 0.
var NodeBoundReasons = []string{BoundNodeMessage, BoundNodeLastReportAt, BoundNodeDegradedNodes, BoundNodeOverLimit}

// Metrics are the aggregator's metrics.
type Metrics struct {
	componentStatus *prometheus.GaugeVec
	nodes           *nodeTable
	issues          *issueTable
	freshUntil      *prometheus.GaugeVec
	writes          *prometheus.CounterVec
	leader          prometheus.Gauge
	rollupSeconds   prometheus.Histogram
	rollups         *prometheus.CounterVec
	writeSeconds    prometheus.Histogram
	bounded         *prometheus.CounterVec
	boundedNodes    *prometheus.CounterVec
	adapters        *adapterMetrics
	maintenance     *maintenance
}

// New registers the metrics on reg.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		componentStatus: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cozy_health_component_status",
			Help: "1 for the component's current published overall status, 0 for the others.",
		}, []string{"namespace", "component", "status"}),
		nodes:  newNodeTable(),
		issues: newIssueTable(),
		freshUntil: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cozy_health_health_fresh_until_timestamp_seconds",
			Help: "Unix time of status.freshUntil of each Health object as the apiserver holds it, watched by every replica: past it, consumers read the object as Unknown (the writer stopped).",
		}, []string{"namespace", "component"}),
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
		bounded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cozy_health_writer_conditions_bounded_total",
			Help: "Conditions dropped or truncated by the writer, per write, because they were outside the Health CRD's bounds (reason: type, resource_ref, reason_truncated, message_truncated, max_items, object_size).",
		}, []string{"reason"}),
		boundedNodes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cozy_health_writer_node_entries_bounded_total",
			Help: "Node entries the writer shortened, per write, so the object stays under etcd's request limit (reason: message, last_report_at: left out of an entry; degraded_nodes: status.degradedNodes cut; over_limit: a write over the budget even so).",
		}, []string{"reason"}),
		adapters:    newAdapterMetrics(),
		maintenance: newMaintenance(),
	}
	for _, c := range append([]prometheus.Collector{m.componentStatus, m.nodes, m.issues, m.freshUntil, m.writes, m.leader, m.rollupSeconds, m.rollups, m.writeSeconds, m.bounded, m.boundedNodes, m.maintenance.node, m.maintenance.overdue, m.maintenance.held}, m.adapters.collectors()...) {
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
	for _, r := range BoundReasons {
		m.bounded.WithLabelValues(r)
	}
	for _, r := range NodeBoundReasons {
		m.boundedNodes.WithLabelValues(r)
	}
	return m, nil
}

// Accepted records a node's report arrival.
func (m *Metrics) Accepted(node string, receivedAt time.Time) {
	m.nodes.row(node).lastReport.Store(receivedAt.UnixNano())
}

// Removed deletes every label set of a node that left the cluster.
func (m *Metrics) Removed(node string) {
	m.nodes.remove(node)
	m.maintenance.removed(node)
}

var _ status.Publisher = (*Metrics)(nil)

// Publish exports the published status of the object namespace/cs.Component
// (status.Publisher): its overall status, its issues and, for a node-local
// component, its node states.
func (m *Metrics) Publish(namespace string, cs *status.Component) {
	m.publishOverall(namespace, cs.Component, cs.Overall)
	if cs.Source == status.FromRollup {
		nodes := make(map[string]report.Status, len(cs.Nodes))
		for n, ns := range cs.Nodes {
			nodes[n] = ns.Status
		}
		m.nodes.publish(cs.Component, nodes)
		m.maintenance.published(namespace, cs)
	}
	m.issues.publish(namespace, cs.Component, status.IssuesOf(cs))
}

// Retime implements status.Publisher: no series carries observedAt or
// freshUntil, so there is nothing to export.
func (m *Metrics) Retime(string, *status.Component) {}

// Remove drops a component's status and issue series in namespace (an
// adapter withdrew its object).
func (m *Metrics) Remove(namespace, component string) {
	m.componentStatus.DeletePartialMatch(prometheus.Labels{"namespace": namespace, "component": component})
	m.issues.publish(namespace, component, nil)
	m.maintenance.removedComponent(namespace, component)
}

func (m *Metrics) publishOverall(namespace, component string, overall report.Status) {
	for _, s := range report.Statuses {
		v := 0.0
		if s == overall {
			v = 1
		}
		m.componentStatus.WithLabelValues(namespace, component, s.String()).Set(v)
	}
}

// HealthFreshUntil records a Health object's status.freshUntil.
func (m *Metrics) HealthFreshUntil(namespace, component string, at time.Time) {
	m.freshUntil.WithLabelValues(namespace, component).Set(float64(at.UnixNano()) / 1e9)
}

// HealthGone drops a Health object's freshUntil series (deleted, or no
// freshUntil written yet).
func (m *Metrics) HealthGone(namespace, component string) {
	m.freshUntil.DeleteLabelValues(namespace, component)
}

// nodeTable holds the per-node series, cozy_health_node_status and
// cozy_health_node_last_report_timestamp_seconds, as one row per node,
// and is their Collector. At 5,000 nodes that is 35,000 series; as a row
// of a few bytes per node instead of a labelled gauge per series it takes
// a twentieth of the memory. The values are set when the rollup publishes
// and when a report arrives; a scrape only reads them.
type nodeTable struct {
	statusDesc, lastReportDesc *prometheus.Desc

	// rows: node name -> *nodeRow. A report's arrival only loads its row.
	rows sync.Map
	// mu guards the rows' status and exported, and orders removals with
	// scrapes.
	mu sync.RWMutex
	// exported counts, per component index, the rows exporting a status.
	exported [len(componentNames)]int
	// componentLabels and statusLabels are the label pairs every row
	// shares; only the node label is a row's own.
	componentLabels [len(componentNames)]*dto.LabelPair
	statusLabels    map[report.Status]*dto.LabelPair
}

// componentNames are the components with node series, by index.
var componentNames = [...]string{report.ComponentEtcd, report.ComponentDisk, report.ComponentCilium, report.ComponentKubeOVN, report.ComponentLinstor, report.ComponentNode}

type nodeRow struct {
	// lastReport is the unix-nano arrival of the last report; 0 for none.
	lastReport atomic.Int64
	// status per component index; exported when the bit of has is set.
	status [len(componentNames)]report.Status
	has    uint8
	// series are the row's status series, built when a status changes;
	// lastSeries is its last-report series. Scrapes only read them.
	series     [len(componentNames)]*statusSeries
	lastSeries *lastReportSeries
}

// statusSeries is one cozy_health_node_status series. Its labels are built
// once per status change and shared by every scrape, so a scrape of 35,000
// series allocates little more than the series' values.
type statusSeries struct {
	desc   *prometheus.Desc
	labels []*dto.LabelPair
	status report.Status
}

// one is the value of every status series.
var one = 1.0

func (s *statusSeries) Desc() *prometheus.Desc { return s.desc }

func (s *statusSeries) Write(m *dto.Metric) error {
	m.Label, m.Gauge = s.labels, &dto.Gauge{Value: &one}
	return nil
}

// lastReportSeries is one cozy_health_node_last_report_timestamp_seconds
// series.
type lastReportSeries struct {
	desc   *prometheus.Desc
	labels []*dto.LabelPair
	row    *nodeRow
}

func (s *lastReportSeries) Desc() *prometheus.Desc { return s.desc }

func (s *lastReportSeries) Write(m *dto.Metric) error {
	g := &struct {
		dto.Gauge
		v float64
	}{v: float64(s.row.lastReport.Load()) / 1e9}
	g.Value = &g.v
	m.Label, m.Gauge = s.labels, &g.Gauge
	return nil
}

func newNodeTable() *nodeTable {
	t := &nodeTable{
		statusDesc: prometheus.NewDesc("cozy_health_node_status",
			"1 for a component's current published status on a node; only the current status has a series (5,000 nodes x 6 components stay at 30,000 series).",
			[]string{"node", "component", "status"}, nil),
		lastReportDesc: prometheus.NewDesc("cozy_health_node_last_report_timestamp_seconds",
			"Unix time the node's last accepted report arrived.", []string{"node"}, nil),
		statusLabels: map[report.Status]*dto.LabelPair{},
	}
	for i, c := range componentNames {
		t.componentLabels[i] = labelPair("component", c)
	}
	for _, st := range report.Statuses {
		t.statusLabels[st] = labelPair("status", st.String())
	}
	return t
}

func (t *nodeTable) statusLabel(s report.Status) *dto.LabelPair {
	if l, ok := t.statusLabels[s]; ok {
		return l
	}
	return labelPair("status", s.String())
}

func componentIndex(component string) int {
	for i, c := range componentNames {
		if c == component {
			return i
		}
	}
	return -1
}

func labelPair(name, value string) *dto.LabelPair { return &dto.LabelPair{Name: &name, Value: &value} }

func (t *nodeTable) row(node string) *nodeRow {
	if r, ok := t.rows.Load(node); ok {
		return r.(*nodeRow)
	}
	r := &nodeRow{}
	r.lastSeries = &lastReportSeries{desc: t.lastReportDesc, labels: []*dto.LabelPair{labelPair("node", node)}, row: r}
	actual, _ := t.rows.LoadOrStore(node, r)
	return actual.(*nodeRow)
}

func (t *nodeTable) publish(component string, nodes map[string]report.Status) {
	ci := componentIndex(component)
	if ci < 0 {
		return
	}
	bit := uint8(1) << ci
	t.mu.Lock()
	defer t.mu.Unlock()
	for node, s := range nodes {
		r := t.row(node)
		if r.has&bit == 0 {
			r.has |= bit
			t.exported[ci]++
		}
		r.status[ci] = s
		if r.series[ci] == nil || r.series[ci].status != s {
			// Labels sorted by name, as the registry requires.
			r.series[ci] = &statusSeries{desc: t.statusDesc, status: s, labels: []*dto.LabelPair{
				t.componentLabels[ci], r.lastSeries.labels[0], t.statusLabel(s),
			}}
		}
	}
	if t.exported[ci] == len(nodes) {
		// Every exported node is still there (each was seen above).
		return
	}
	t.rows.Range(func(k, v any) bool {
		r := v.(*nodeRow)
		if _, still := nodes[k.(string)]; !still && r.has&bit != 0 {
			r.has &^= bit
			r.series[ci] = nil
			t.exported[ci]--
		}
		return true
	})
}

func (t *nodeTable) remove(node string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v, ok := t.rows.LoadAndDelete(node)
	if !ok {
		return
	}
	r := v.(*nodeRow)
	for ci := range componentNames {
		if r.has&(1<<ci) != 0 {
			t.exported[ci]--
		}
	}
}

// Describe implements prometheus.Collector.
func (t *nodeTable) Describe(ch chan<- *prometheus.Desc) {
	ch <- t.statusDesc
	ch <- t.lastReportDesc
}

// MetricTypes names the type of each metric Collect sends, which a gather
// shows only once a node has reported (pkg/reference.Typed: the metrics
// reference is generated from it).
func (t *nodeTable) MetricTypes() map[*prometheus.Desc]prometheus.ValueType {
	return map[*prometheus.Desc]prometheus.ValueType{t.statusDesc: prometheus.GaugeValue, t.lastReportDesc: prometheus.GaugeValue}
}

// Collect implements prometheus.Collector.
func (t *nodeTable) Collect(ch chan<- prometheus.Metric) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	t.rows.Range(func(_, v any) bool {
		r := v.(*nodeRow)
		for ci := range componentNames {
			if r.has&(1<<ci) != 0 {
				ch <- r.series[ci]
			}
		}
		if r.lastReport.Load() != 0 {
			ch <- r.lastSeries
		}
		return true
	})
}

// Write counts one Health status write and its duration.
func (m *Metrics) Write(result string, took time.Duration) {
	m.writes.WithLabelValues(result).Inc()
	m.writeSeconds.Observe(took.Seconds())
}

// BoundedConditions counts n conditions the writer dropped or truncated
// for reason (writer.Bound*).
func (m *Metrics) BoundedConditions(reason string, n int) {
	m.bounded.WithLabelValues(reason).Add(float64(n))
}

// BoundedNodeEntries counts n node entries the writer shortened for reason
// (writer.BoundNode*).
func (m *Metrics) BoundedNodeEntries(reason string, n int) {
	m.boundedNodes.WithLabelValues(reason).Add(float64(n))
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

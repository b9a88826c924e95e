package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Reasons of cozy_health_adapter_errors_total.
const (
	// AdapterErrorPanic: a judgement panicked (the component reads
	// Unknown/JudgeFailed).
	AdapterErrorPanic = "panic"
	// AdapterErrorTimeout: a judgement did not finish within its deadline
	// (Unknown/JudgeFailed).
	AdapterErrorTimeout = "timeout"
	// AdapterErrorNotSynced: an informer did not sync within the sync
	// timeout (Unknown/SourceNotSynced); counted once per occurrence.
	AdapterErrorNotSynced = "not_synced"
	// AdapterErrorWatch: a list or watch of a source failed (forbidden,
	// apiserver unreachable...). An API that went away is not counted.
	AdapterErrorWatch = "watch"
	// AdapterErrorWatchFailing: a source the API has not confirmed past
	// the watch grace (Unknown/WatchFailing); counted once per occurrence.
	AdapterErrorWatchFailing = "watch_failing"
	// AdapterErrorRead: a read of a source the aggregator polls (the
	// LINSTOR controller's REST API) failed: unreachable, refused, an
	// answer that does not decode, the client certificate missing.
	AdapterErrorRead = "read"
)

// AdapterErrorReasons are every reason of cozy_health_adapter_errors_total.
var AdapterErrorReasons = []string{AdapterErrorPanic, AdapterErrorTimeout, AdapterErrorNotSynced, AdapterErrorWatch, AdapterErrorWatchFailing, AdapterErrorRead}

// adapterMetrics are the cluster adapters' own metrics, one label set per
// adapter (a handful), set by the adapter manager when it judges.
type adapterMetrics struct {
	applicable   *prometheus.GaugeVec
	synced       *prometheus.GaugeVec
	objects      *prometheus.GaugeVec
	judgeSeconds *prometheus.HistogramVec
	errors       *prometheus.CounterVec
	skipped      *prometheus.CounterVec
	events       *prometheus.CounterVec
	pending      *prometheus.GaugeVec
	confirmed    *prometheus.GaugeVec
}

func newAdapterMetrics() *adapterMetrics {
	return &adapterMetrics{
		applicable: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cozy_health_adapter_applicable",
			Help: "1 when every API a cluster adapter requires is served (its CRDs are installed and established), 0 when not: the adapter publishes nothing.",
		}, []string{"adapter"}),
		synced: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cozy_health_adapter_synced",
			Help: "1 when every informer of an applicable cluster adapter has synced, 0 when one has not or the adapter is not applicable.",
		}, []string{"adapter"}),
		objects: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cozy_health_adapter_objects",
			Help: "Objects a cluster adapter watches (its sources' informer caches), as of its last judgement.",
		}, []string{"adapter"}),
		judgeSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cozy_health_adapter_judge_duration_seconds",
			Help:    "Time of one judgement of a cluster adapter over every object it watches.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"adapter"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cozy_health_adapter_errors_total",
			Help: "Cluster adapter failures by reason: panic and timeout (a judgement failed: JudgeFailed), not_synced (an informer past the sync timeout: SourceNotSynced), watch (a list or watch of a source failed), watch_failing (a source unconfirmed by the API past the grace: WatchFailing), read (a read of a polled source, the LINSTOR controller, failed).",
		}, []string{"adapter", "reason"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cozy_health_adapter_judges_skipped_total",
			Help: "Periodic judgements of a cluster adapter not started because its previous judgement, past its deadline, still runs (one judgement per adapter at a time).",
		}, []string{"adapter"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cozy_health_adapter_events_total",
			Help: "Watch events (adds, updates, deletes) on a cluster adapter's sources, each one a reason to judge the adapter again.",
		}, []string{"adapter"}),
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cozy_health_adapter_pending_events",
			Help: "Watch events on a cluster adapter's sources since its last judgement started (its queue depth), as of the manager's last pass.",
		}, []string{"adapter"}),
		confirmed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cozy_health_adapter_last_confirmed_timestamp_seconds",
			Help: "Unix time the API last confirmed a cluster adapter's caches (its stalest source: an open watch confirms continuously), as of the manager's last pass; absent until its informers first synced. Past the watch grace the adapter reads WatchFailing.",
		}, []string{"adapter"}),
	}
}

func (a *adapterMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{a.applicable, a.synced, a.objects, a.judgeSeconds, a.errors, a.skipped, a.events, a.pending, a.confirmed}
}

// AdaptersKnown creates every adapter's series (0, and each error reason at
// 0), so an adapter whose API is absent reads 0 rather than nothing and a
// rate over its errors starts at its first scrape.
func (m *Metrics) AdaptersKnown(names []string) {
	for _, n := range names {
		m.adapters.applicable.WithLabelValues(n)
		m.adapters.synced.WithLabelValues(n)
		m.adapters.objects.WithLabelValues(n)
		m.adapters.skipped.WithLabelValues(n)
		m.adapters.events.WithLabelValues(n)
		m.adapters.pending.WithLabelValues(n)
		for _, r := range AdapterErrorReasons {
			m.adapters.errors.WithLabelValues(n, r)
		}
	}
}

// AdapterState records whether an adapter is applicable, whether its
// informers have synced and how many objects they hold.
func (m *Metrics) AdapterState(name string, applicable, synced bool, objects int) {
	m.adapters.applicable.WithLabelValues(name).Set(boolValue(applicable))
	m.adapters.synced.WithLabelValues(name).Set(boolValue(applicable && synced))
	m.adapters.objects.WithLabelValues(name).Set(float64(objects))
}

// AdapterJudgeSkipped counts a periodic judgement not started because the
// adapter's previous one still runs past its deadline.
func (m *Metrics) AdapterJudgeSkipped(name string) {
	m.adapters.skipped.WithLabelValues(name).Inc()
}

// AdapterJudged records the duration of one judgement (of a late one too,
// when it finally returns).
func (m *Metrics) AdapterJudged(name string, took time.Duration) {
	m.adapters.judgeSeconds.WithLabelValues(name).Observe(took.Seconds())
}

// AdapterEvent counts one watch event on one of the adapter's sources.
func (m *Metrics) AdapterEvent(name string) {
	m.adapters.events.WithLabelValues(name).Inc()
}

// AdapterPending records the watch events not yet judged (queue depth).
func (m *Metrics) AdapterPending(name string, events int) {
	m.adapters.pending.WithLabelValues(name).Set(float64(events))
}

// AdapterConfirmed records when the API last confirmed the adapter's
// caches.
func (m *Metrics) AdapterConfirmed(name string, at time.Time) {
	m.adapters.confirmed.WithLabelValues(name).Set(float64(at.UnixNano()) / 1e9)
}

// AdapterError counts one failure of an adapter (reason: one of
// AdapterErrorReasons).
func (m *Metrics) AdapterError(name, reason string) {
	m.adapters.errors.WithLabelValues(name, reason).Inc()
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

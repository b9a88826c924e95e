package runner

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the runner's own Prometheus metrics, one series per check.
type metrics struct {
	duration        *prometheus.HistogramVec
	lastSuccess     *prometheus.GaugeVec
	errors          *prometheus.CounterVec
	notApplicable   *prometheus.CounterVec
	applicable      *prometheus.GaugeVec
	observations    *prometheus.GaugeVec
	reports         prometheus.Counter
	sequence        prometheus.Gauge
	collectDuration prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cozy_health_agent_check_duration_seconds",
			Help:    "Duration of one check run (abandoned runs count up to their deadline).",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2, 5},
		}, []string{"check"}),
		lastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cozy_health_agent_check_last_success_timestamp_seconds",
			Help: "Unix time of the check's last run that returned observations without error.",
		}, []string{"check"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cozy_health_agent_check_errors_total",
			Help: "Check runs that yielded Unknown, by reason (CheckTimeout, CheckFailed, CheckPanicked, InputMissing, InputUnreadable).",
		}, []string{"check", "reason"}),
		notApplicable: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cozy_health_agent_check_not_applicable_total",
			Help: "Check runs whose source is absent on this node.",
		}, []string{"check"}),
		applicable: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cozy_health_agent_check_applicable",
			Help: "1 when the check's source was present at its last completed run, 0 when not applicable.",
		}, []string{"check"}),
		observations: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cozy_health_agent_observations",
			Help: "Observations in the latest report, by status.",
		}, []string{"status"}),
		reports: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cozy_health_agent_reports_total",
			Help: "Reports collected.",
		}),
		sequence: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cozy_health_agent_report_sequence",
			Help: "Sequence number of the latest published report.",
		}),
		collectDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "cozy_health_agent_collect_duration_seconds",
			Help:    "Time to run every check once and build a report.",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2, 4, 8},
		}),
	}
	for _, c := range []prometheus.Collector{m.duration, m.lastSuccess, m.errors, m.notApplicable, m.applicable, m.observations, m.reports, m.sequence, m.collectDuration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

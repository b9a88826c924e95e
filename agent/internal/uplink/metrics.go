package uplink

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics of the uplink, labelled by replica dial address.
type metrics struct {
	connected *prometheus.GaugeVec
	sent      *prometheus.CounterVec
	acks      *prometheus.CounterVec
	// reportBytes, folded and bounded: what wire.Fit made of the reports.
	reportBytes prometheus.Gauge
	folded      prometheus.Counter
	bounded     prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		connected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cozy_health_agent_uplink_connected",
			Help: "1 while the stream to this aggregator replica is authenticated and open.",
		}, []string{"aggregator"}),
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cozy_health_agent_uplink_reports_sent_total",
			Help: "Signed reports written to this aggregator replica's stream.",
		}, []string{"aggregator"}),
		acks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cozy_health_agent_uplink_acks_total",
			Help: "Report acks from this aggregator replica, by result (accepted, rejected).",
		}, []string{"aggregator", "result"}),
		reportBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cozy_health_agent_report_bytes",
			Help: "Serialized size of the latest report, after folding to the report budget.",
		}),
		folded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cozy_health_agent_report_observations_folded_total",
			Help: "Observations folded into summary observations to keep reports within the budget the aggregators accept.",
		}),
		bounded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cozy_health_agent_report_fields_bounded_total",
			Help: "Observation fields cut to the limits the aggregators accept (a long reason or message, a long resource name, an attribute that is not finite).",
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.connected, m.sent, m.acks, m.reportBytes, m.folded, m.bounded} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register uplink metrics: %w", err)
			}
		}
	}
	return m, nil
}

// forget drops a replica's series once it is gone.
func (m *metrics) forget(addr string) {
	m.connected.DeleteLabelValues(addr)
	m.sent.DeleteLabelValues(addr)
	m.acks.DeleteLabelValues(addr, "accepted")
	m.acks.DeleteLabelValues(addr, "rejected")
}

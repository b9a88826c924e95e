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
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.connected, m.sent, m.acks} {
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

// Package kubeovn serves kube-ovn-pinger's /metrics: the same metric
// definitions as kube-ovn's pkg/pinger/metrics.go (names, types, labels),
// registered on a real Prometheus registry, with settable OVS and
// ovn-controller state (the lab's ovs-down fault), port-binding
// inconsistencies and node ping loss.
package kubeovn

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cozystack/cozy-health/test/sources/fault"
)

// Config configures a Server.
type Config struct {
	// Node is this pinger's node (label nodeName / src_node_name).
	Node string
	// NodeIP is this node's IP (label src_node_ip).
	NodeIP string
	// Targets are the other nodes pinged: name -> IP.
	Targets map[string]string
	// PingInterval, when set, pings every target on this interval in the
	// background (kube-ovn's default is 5s); otherwise call Ping.
	PingInterval time.Duration
}

// Server is a kube-ovn-pinger stand-in.
type Server struct {
	// URL is the metrics URL.
	URL string
	// Fault switches misbehaviour.
	Fault fault.Switch

	cfg  Config
	srv  *http.Server
	stop chan struct{}

	ovsUp, ovsDown, ovnUp, ovnDown *prometheus.GaugeVec
	inconsistent                   *prometheus.GaugeVec
	nodeLost, nodeCount            *prometheus.CounterVec
	nodeLatency                    *prometheus.HistogramVec

	// mu guards loss, the fraction of pings lost per round.
	mu   sync.Mutex
	loss float64
}

// Start serves on 127.0.0.1:0 (or addr when set).
func Start(addr string, cfg Config) (*Server, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("kube-ovn pinger stand-in: listen: %w", err)
	}
	node := []string{"nodeName"}
	ping := []string{"src_node_name", "src_node_ip", "src_pod_ip", "target_node_name", "target_node_ip"}
	s := &Server{
		cfg:          cfg,
		stop:         make(chan struct{}),
		ovsUp:        prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pinger_ovs_up", Help: "If the ovs on the node is up"}, node),
		ovsDown:      prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pinger_ovs_down", Help: "If the ovs on the node is down"}, node),
		ovnUp:        prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pinger_ovn_controller_up", Help: "If the ovn_controller on the node is up"}, node),
		ovnDown:      prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pinger_ovn_controller_down", Help: "If the ovn_controller on the node is down"}, node),
		inconsistent: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pinger_inconsistent_port_binding", Help: "The number of mismatch port bindings between ovs and ovn-sb"}, node),
		nodeLost:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pinger_node_ping_lost_total", Help: "The lost count for pod ping node"}, ping),
		nodeCount:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pinger_node_ping_count_total", Help: "The total count for pod ping node"}, ping),
		nodeLatency:  prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "pinger_node_ping_latency_ms", Help: "The latency ms histogram for pod ping node", Buckets: []float64{.25, .5, 1, 2, 5, 10, 30}}, ping),
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(s.ovsUp, s.ovsDown, s.ovnUp, s.ovnDown, s.inconsistent, s.nodeLost, s.nodeCount, s.nodeLatency)
	s.SetOVS(true)
	s.SetOVNController(true)
	s.SetInconsistentPortBindings(0)
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		if s.Fault.Apply(w, r) {
			return
		}
		h.ServeHTTP(w, r)
	})
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	s.URL = "http://" + ln.Addr().String() + "/metrics"
	go func() { _ = s.srv.Serve(ln) }()
	if cfg.PingInterval > 0 {
		go s.pingLoop()
	}
	return s, nil
}

func (s *Server) pingLoop() {
	t := time.NewTicker(s.cfg.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.Ping(1)
		}
	}
}

// SetOVS sets ovs up or down, as SetOvsUpMetrics / SetOvsDownMetrics do.
func (s *Server) SetOVS(up bool) { setPair(s.ovsUp, s.ovsDown, s.cfg.Node, up) }

// SetOVNController sets ovn-controller up or down.
func (s *Server) SetOVNController(up bool) { setPair(s.ovnUp, s.ovnDown, s.cfg.Node, up) }

func setPair(up, down *prometheus.GaugeVec, node string, isUp bool) {
	if isUp {
		up.WithLabelValues(node).Set(1)
		down.WithLabelValues(node).Set(0)
	} else {
		up.WithLabelValues(node).Set(0)
		down.WithLabelValues(node).Set(1)
	}
}

// SetInconsistentPortBindings sets the mismatch count.
func (s *Server) SetInconsistentPortBindings(n int) {
	s.inconsistent.WithLabelValues(s.cfg.Node).Set(float64(n))
}

// SetPingLoss sets the fraction of pings lost from now on.
func (s *Server) SetPingLoss(f float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loss = f
}

// Ping runs n ping rounds to every target, losing the set fraction.
func (s *Server) Ping(n int) {
	s.mu.Lock()
	loss := s.loss
	s.mu.Unlock()
	for target, ip := range s.cfg.Targets {
		l := []string{s.cfg.Node, s.cfg.NodeIP, "10.244.0.17", target, ip}
		lost := int(float64(n)*loss + 0.5)
		s.nodeCount.WithLabelValues(l...).Add(float64(n))
		s.nodeLost.WithLabelValues(l...).Add(float64(lost))
		for range n - lost {
			s.nodeLatency.WithLabelValues(l...).Observe(0.2 + rand.Float64())
		}
	}
}

// Close stops serving.
func (s *Server) Close() error {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	if err := s.srv.Close(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

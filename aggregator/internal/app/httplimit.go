package app

import (
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"golang.org/x/net/netutil"

	"github.com/cozystack/cozy-health/aggregator/internal/config"
)

// httpConnMetrics count the connections of the HTTP servers (probe/drain
// and metrics), by listener.
type httpConnMetrics struct {
	open     *prometheus.GaugeVec
	rejected *prometheus.CounterVec
}

// Reason of cozy_health_http_connections_rejected_total.
const reasonTooManyConnections = "too_many_connections"

func newHTTPConnMetrics(reg prometheus.Registerer) (*httpConnMetrics, error) {
	m := &httpConnMetrics{
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cozy_health_http_connections",
			Help: "Connections open on the aggregator's HTTP listeners (http: probes and drain check; metrics), by listener.",
		}, []string{"listener"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cozy_health_http_connections_rejected_total",
			Help: "Connections to the aggregator's HTTP listeners closed at accept, by listener and reason (too_many_connections: the peer address holds --http-max-conns-per-peer already).",
		}, []string{"listener", "reason"}),
	}
	for _, l := range []string{"http", "metrics"} {
		m.open.WithLabelValues(l)
		m.rejected.WithLabelValues(l, reasonTooManyConnections)
	}
	for _, c := range []prometheus.Collector{m.open, m.rejected} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register http connection metrics: %w", err)
		}
	}
	return m, nil
}

// newHTTPServer is an HTTP server of the aggregator under lim: every
// timeout set (a connection that says nothing, or nothing more, is closed)
// and the headers bounded.
func newHTTPServer(h http.Handler, lim config.HTTPLimits, log *zap.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		ReadTimeout:       lim.ReadTimeout,
		WriteTimeout:      lim.WriteTimeout,
		IdleTimeout:       lim.IdleTimeout,
		MaxHeaderBytes:    lim.MaxHeaderBytes,
		ErrorLog:          zap.NewStdLog(log),
	}
}

// limitListener bounds l's connections: at most lim.MaxConnsPerPeer per
// IP address (more are closed at accept, counted and logged) and
// lim.MaxConns in all (netutil.LimitListener: past it Accept waits, the
// kernel's accept queue holds the rest). Loopback is bounded too: unlike
// ingest, nothing here expects many connections from one address.
func limitListener(l net.Listener, name string, lim config.HTTPLimits, m *httpConnMetrics, log *zap.Logger) net.Listener {
	p := &peerLimitListener{Listener: l, name: name, max: lim.MaxConnsPerPeer, m: m, log: log, perIP: map[string]int{}}
	return netutil.LimitListener(p, lim.MaxConns)
}

// peerLimitListener closes a connection whose IP address already holds max.
type peerLimitListener struct {
	net.Listener
	name string
	max  int
	m    *httpConnMetrics
	log  *zap.Logger

	mu         sync.Mutex // guards perIP, lastLog, suppressed
	perIP      map[string]int
	lastLog    time.Time
	suppressed int
}

// Accept returns the next connection within the per-address bound.
func (p *peerLimitListener) Accept() (net.Conn, error) {
	for {
		c, err := p.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := peerIP(c.RemoteAddr())
		p.mu.Lock()
		if p.perIP[ip] >= p.max {
			logNow, suppressed := false, 0
			if now := time.Now(); now.Sub(p.lastLog) >= 10*time.Second {
				logNow, suppressed, p.lastLog, p.suppressed = true, p.suppressed, now, 0
			} else {
				p.suppressed++
			}
			p.mu.Unlock()
			p.m.rejected.WithLabelValues(p.name, reasonTooManyConnections).Inc()
			if logNow {
				p.log.Warn("http connection refused", zap.String("listener", p.name), zap.String("reason", reasonTooManyConnections),
					zap.String("peer", c.RemoteAddr().String()), zap.Int("maxPerPeer", p.max), zap.Int("suppressedSinceLast", suppressed))
			}
			_ = c.Close()
			continue
		}
		p.perIP[ip]++
		p.mu.Unlock()
		p.m.open.WithLabelValues(p.name).Inc()
		return &peerConn{Conn: c, p: p, ip: ip}, nil
	}
}

// peerConn gives its slot back when closed.
type peerConn struct {
	net.Conn
	p    *peerLimitListener
	ip   string
	once sync.Once
}

// Close implements net.Conn.
func (c *peerConn) Close() error {
	c.once.Do(func() {
		c.p.mu.Lock()
		if c.p.perIP[c.ip]--; c.p.perIP[c.ip] <= 0 {
			delete(c.p.perIP, c.ip)
		}
		c.p.mu.Unlock()
		c.p.m.open.WithLabelValues(c.p.name).Dec()
	})
	return c.Conn.Close()
}

// peerIP is the IP address of a connection's remote address.
func peerIP(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	if h, _, err := net.SplitHostPort(a.String()); err == nil {
		return h
	}
	return a.String()
}

package metrictest

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c_total", Help: "c"}, []string{"check", "reason"})
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "g", Help: "g"}, []string{"node"})
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h_seconds", Help: "h"})
	reg.MustRegister(c, g, h)
	c.WithLabelValues("a", "timeout").Add(3)
	c.WithLabelValues("a", "panic").Add(1)
	c.WithLabelValues("b", "timeout").Add(5)
	g.WithLabelValues("n1").Set(2.5)
	g.WithLabelValues("").Set(7)
	h.Observe(0.1)
	h.Observe(0.2)

	assert.Equal(t, 3.0, Value(t, reg, "c_total", "check", "a", "reason", "timeout"))
	assert.Equal(t, 5.0, Value(t, reg, "c_total", "reason", "timeout", "check", "b"), "pairs in any order")
	assert.Equal(t, 0.0, Value(t, reg, "c_total", "check", "c"), "no such series")
	assert.Equal(t, 0.0, Value(t, reg, "missing"), "no such family")
	assert.Nil(t, Lookup(t, reg, "c_total", "check", "c"))
	assert.Equal(t, 9.0, Sum(t, reg, "c_total"))
	assert.Equal(t, 4.0, Sum(t, reg, "c_total", "check", "a"))
	assert.Equal(t, 2.5, Value(t, reg, "g", "node", "n1"))
	assert.Equal(t, 7.0, Value(t, reg, "g", "node", ""), "an empty label value is matched as PromQL does")
	assert.Equal(t, 2.0, Value(t, reg, "h_seconds"), "a histogram's sample count")
	assert.Len(t, Series(t, reg, "c_total"), 3)

	m := Lookup(t, reg, "c_total", Pairs(map[string]string{"reason": "panic", "check": "a"})...)
	require.NotNil(t, m)
	assert.Equal(t, map[string]string{"check": "a", "reason": "panic"}, LabelsOf(m))
	assert.Equal(t, []string{"a", "1", "b", "2"}, Pairs(map[string]string{"b": "2", "a": "1"}))
	assert.Panics(t, func() { Has(m, "check") }, "an odd number of label strings")
}

// TestScrape reads a registry's series back through its /metrics text, as
// the lab's tests read the binaries'.
func TestScrape(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c_total", Help: "c"}, []string{"node"})
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "g", Help: "g"})
	reg.MustRegister(c, g)
	c.WithLabelValues("n1").Add(3)
	c.WithLabelValues("n2").Add(4)
	g.Set(2.5)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()

	scraped := Scrape(t, context.Background(), srv.URL)
	assert.Equal(t, 4.0, Value(t, scraped, "c_total", Pairs(map[string]string{"node": "n2"})...))
	assert.Equal(t, 7.0, Sum(t, scraped, "c_total"))
	assert.Equal(t, 2.5, Value(t, scraped, "g"))
	assert.Nil(t, Lookup(t, scraped, "c_total", "node", "n3"))

	text := Text(t, strings.NewReader("# TYPE up gauge\nup{job=\"a\"} 1\nup{job=\"b\"} 0\n"))
	assert.Equal(t, 1.0, Value(t, text, "up", "job", "a"))
	assert.Len(t, Series(t, text, "up"), 2)
}

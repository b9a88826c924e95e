package reference

import (
	"flag"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseDesc(t *testing.T) {
	d := prometheus.NewDesc("x_total", `help with "quotes", braces {} and a comma`, []string{"a", "b"}, prometheus.Labels{"k": "v"})
	m, err := ParseDesc(d.String())
	require.NoError(t, err)
	assert.Equal(t, Metric{Name: "x_total", Help: `help with "quotes", braces {} and a comma`, Labels: []string{"a", "b"}, ConstLabels: []string{`k="v"`}}, m)
	m, err = ParseDesc(prometheus.NewDesc("y", "h", nil, nil).String())
	require.NoError(t, err)
	assert.Equal(t, Metric{Name: "y", Help: "h"}, m)
	_, err = ParseDesc("Something{else}")
	assert.Error(t, err)
}

type typed struct{ desc *prometheus.Desc }

func (c typed) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (typed) Collect(chan<- prometheus.Metric)      {}
func (c typed) MetricTypes() map[*prometheus.Desc]prometheus.ValueType {
	return map[*prometheus.Desc]prometheus.ValueType{c.desc: prometheus.GaugeValue}
}

type untyped struct{ desc *prometheus.Desc }

func (c untyped) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (untyped) Collect(chan<- prometheus.Metric)      {}

// TestRegistryMetrics: a vector without series is described by its
// vector's type, a collector of its own by what it says (Typed), and one
// that says nothing is an error naming it.
func TestRegistryMetrics(t *testing.T) {
	r := NewRegistry()
	r.MustRegister(
		prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c_total", Help: "c"}, []string{"l"}),
		prometheus.NewGauge(prometheus.GaugeOpts{Name: "g", Help: "g"}),
		prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "h_seconds", Help: "h"}, []string{"l"}),
		typed{prometheus.NewDesc("t", "t", []string{"n"}, nil)},
	)
	ms, err := r.Metrics()
	require.NoError(t, err)
	types := map[string]string{}
	for _, m := range ms {
		types[m.Name] = m.Type
	}
	assert.Equal(t, map[string]string{"c_total": "counter", "g": "gauge", "h_seconds": "histogram", "t": "gauge"}, types)

	r.MustRegister(untyped{prometheus.NewDesc("u", "u", nil, nil)})
	_, err = r.Metrics()
	assert.ErrorContains(t, err, "metric u:")
}

func TestGoFlags(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.Duration("every", 5*time.Second, "how often")
	fs.Bool("on", true, "switch")
	fs.String("path", "", "a `file` to read")
	assert.Equal(t, []Flag{
		{Name: "every", Type: "duration", Default: "5s", Usage: "how often"},
		{Name: "on", Type: "bool", Default: "true", Usage: "switch"},
		{Name: "path", Type: "file", Default: "", Usage: "a file to read"},
	}, GoFlags(fs))
}

// Package metrictest reads series from a prometheus.Gatherer (a Registry,
// or a scraped /metrics: Scrape, Text) in tests: one way of finding a
// series by its name and some of its labels, and of reading its value, for
// every package's tests.
package metrictest

import (
	"context"
	"io"
	"maps"
	"net/http"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Series returns every series of the family name, in the gatherer's order
// (none when there is no such family). A failed Gather fails the test.
func Series(t testing.TB, g prometheus.Gatherer, name string) []*dto.Metric {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()
		}
	}
	return nil
}

// Lookup returns the first series of name whose labels include every
// name/value pair of labels ("reason", "x", ...), or nil.
func Lookup(t testing.TB, g prometheus.Gatherer, name string, labels ...string) *dto.Metric {
	t.Helper()
	for _, m := range Series(t, g, name) {
		if Has(m, labels...) {
			return m
		}
	}
	return nil
}

// Value is ValueOf the first series of name whose labels include labels;
// 0 when there is none.
func Value(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	return ValueOf(Lookup(t, g, name, labels...))
}

// Sum is the sum of ValueOf every series of name whose labels include
// labels.
func Sum(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	var sum float64
	for _, m := range Series(t, g, name) {
		if Has(m, labels...) {
			sum += ValueOf(m)
		}
	}
	return sum
}

// ValueOf is a series' value: a counter's, a gauge's or an untyped
// metric's value, or a histogram's or a summary's sample count; 0 for nil.
func ValueOf(m *dto.Metric) float64 {
	return m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue() +
		float64(m.GetHistogram().GetSampleCount()) + float64(m.GetSummary().GetSampleCount())
}

// Has reports whether m's labels include every name/value pair of labels;
// as in PromQL, a label m does not have matches the value "".
func Has(m *dto.Metric, labels ...string) bool {
	if len(labels)%2 != 0 {
		panic("metrictest: labels are name/value pairs")
	}
	got := LabelsOf(m)
	for i := 0; i < len(labels); i += 2 {
		if got[labels[i]] != labels[i+1] {
			return false
		}
	}
	return true
}

// LabelsOf is m's labels by name.
func LabelsOf(m *dto.Metric) map[string]string {
	out := make(map[string]string, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// Pairs turns a label map into the name/value pairs Lookup, Value and Sum
// take, sorted by name.
func Pairs(labels map[string]string) []string {
	out := make([]string, 0, 2*len(labels))
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		out = append(out, k, labels[k])
	}
	return out
}

// Text is the metric families of a text exposition (what /metrics serves)
// as a Gatherer, for Series, Lookup, Value and Sum. A parse error fails the
// test.
func Text(t testing.TB, r io.Reader) prometheus.Gatherer {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(r)
	if err != nil {
		t.Fatalf("parse metrics: %v", err)
	}
	out := make([]*dto.MetricFamily, 0, len(fams))
	for _, name := range slices.Sorted(maps.Keys(fams)) {
		out = append(out, fams[name])
	}
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) { return out, nil })
}

// Scrape is Text of what GET url (a /metrics endpoint) answers under ctx.
// A failed request fails the test.
func Scrape(t testing.TB, ctx context.Context, url string) prometheus.Gatherer {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %s", url, resp.Status)
	}
	return Text(t, resp.Body)
}

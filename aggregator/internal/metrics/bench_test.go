package metrics

import (
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/cozystack/cozy-health/pkg/report"
)

// BenchmarkScrape5000Nodes measures one scrape of the aggregator's
// registry (gather and text encoding) with 5,000 nodes: 30,000 node-status
// and 5,000 last-report series.
func BenchmarkScrape5000Nodes(b *testing.B) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		b.Fatal(err)
	}
	nodes := map[string]report.Status{}
	for i := range 5000 {
		n := fmt.Sprintf("node-%05d", i)
		nodes[n] = report.StatusHealthy
		m.Accepted(n, time.Now())
	}
	for _, comp := range report.NodeComponents {
		m.Publish(testNS, rolledUp(comp, report.StatusHealthy, nodes))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		mfs, err := reg.Gather()
		if err != nil {
			b.Fatal(err)
		}
		for _, mf := range mfs {
			if _, err := expfmt.MetricFamilyToText(io.Discard, mf); err != nil {
				b.Fatal(err)
			}
		}
	}
}

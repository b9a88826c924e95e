package drainserver

import (
	"io"
	"net/http"
	"sort"
	"testing"
	"time"

	"github.com/cozystack/cozy-health/aggregator/internal/drain"
	"github.com/cozystack/cozy-health/aggregator/internal/drain/draintest"
	"github.com/cozystack/cozy-health/pkg/drainapi"
	clocktesting "k8s.io/utils/clock/testing"
)

// BenchmarkBudget5000Nodes: one evaluation of every node's verdict (the
// per-5-s cost on every replica) and GET /v1/drain-budget served from it,
// at the bench's 5,000 nodes.
func BenchmarkBudget5000Nodes(b *testing.B) {
	nodes := draintest.SimulatedCluster()
	svc, err := NewService(Config{}, func(time.Time) map[string]drain.NodeInfo { return nodes }, clocktesting.NewFakeClock(t0), nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	bud, err := NewBudget(svc, nil)
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	bud.Update()
	b.Logf("one evaluation of %d nodes: %s", len(nodes), time.Since(start))
	mux := http.NewServeMux()
	NewBudgetHandler(bud, nil).Mount(mux)
	base := serveMux(b, mux)
	var lat []time.Duration
	size := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t := time.Now()
		resp, err := http.Get(base + drainapi.BudgetPath)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		lat = append(lat, time.Since(t))
		size = int(n)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(size), "bytes")
}

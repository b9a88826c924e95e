package drainserver

import (
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"testing"
	"time"

	"github.com/cozystack/cozy-health/aggregator/internal/drain"
	"github.com/cozystack/cozy-health/aggregator/internal/drain/draintest"
)

// BenchmarkDrainCheckHTTP is one GET /v1/drain-check over a loopback
// listener through the Service (cached snapshot), JSON encoding included.
func BenchmarkDrainCheckHTTP(b *testing.B) {
	nodes := draintest.SimulatedCluster()
	svc, err := NewService(Config{MaxSnapshotAge: time.Hour}, func(time.Time) map[string]drain.NodeInfo { return nodes }, nil, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	svc.Snapshot(time.Now())
	base := serveHTTP(b, NewHandler(svc, nil))
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	rng := rand.New(rand.NewSource(3))
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		url := fmt.Sprintf("%s%s?node=node-%04d", base, Path, rng.Intn(draintest.BenchNodes))
		start := time.Now()
		resp, err := client.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		lat = append(lat, time.Since(start))
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	b.StopTimer()
	draintest.ReportLatencies(b, lat)
}

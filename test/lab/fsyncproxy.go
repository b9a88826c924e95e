package lab

import (
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The lab cannot make a real disk slow (no dm-delay, no FUSE here), so the
// fsync-slow fault works on what the agent reads: a proxy in front of the
// etcd member's real /metrics that, while the fault is on, adds slow
// observations to etcd's real WAL fsync and backend commit histograms at
// every scrape. The histograms stay cumulative and monotonic, exactly as a
// slow disk would move them, so the agent's delta-p99 computation is what
// detects it. Everything else passes through unchanged.

// slowHistograms are the histograms fsync-slow moves.
var slowHistograms = map[string]float64{
	"etcd_disk_wal_fsync_duration_seconds":      1.5, // seconds per added observation
	"etcd_disk_backend_commit_duration_seconds": 1.5,
}

// slowObservationsPerScrape dominates any idle member's real fsync rate, so
// the p99 of the delta lands in the slow bucket.
const slowObservationsPerScrape = 500

// fsyncProxy serves an etcd member's /metrics with optional slow fsyncs.
type fsyncProxy struct {
	upstream string
	client   *http.Client

	mu    sync.Mutex // guards slow and added
	slow  bool
	added map[string]uint64 // histogram name -> slow observations added so far
}

func newFsyncProxy(upstream string) *fsyncProxy {
	return &fsyncProxy{upstream: upstream, client: &http.Client{Timeout: 2 * time.Second}, added: map[string]uint64{}}
}

func (p *fsyncProxy) setSlow(slow bool) {
	p.mu.Lock()
	p.slow = slow
	p.mu.Unlock()
}

func (p *fsyncProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	resp, err := p.client.Get(p.upstream + r.URL.Path)
	if err != nil {
		http.Error(w, fmt.Sprintf("etcd metrics upstream: %v", err), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	if r.URL.Path != "/metrics" || resp.StatusCode != http.StatusOK {
		w.WriteHeader(resp.StatusCode)
		return
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		http.Error(w, fmt.Sprintf("parse etcd metrics: %v", err), http.StatusBadGateway)
		return
	}
	p.mu.Lock()
	for name, secs := range slowHistograms {
		if p.slow {
			p.added[name] += slowObservationsPerScrape
		}
		if mf, ok := families[name]; ok && p.added[name] > 0 {
			addSlow(mf, p.added[name], secs)
		}
	}
	p.mu.Unlock()
	names := make([]string, 0, len(families))
	for n := range families {
		names = append(names, n)
	}
	sort.Strings(names)
	w.Header().Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	for _, n := range names {
		if _, err := expfmt.MetricFamilyToText(w, families[n]); err != nil {
			return
		}
	}
}

// addSlow adds n observations of secs seconds to every series of a histogram.
func addSlow(mf *dto.MetricFamily, n uint64, secs float64) {
	for _, m := range mf.GetMetric() {
		h := m.GetHistogram()
		if h == nil {
			continue
		}
		c := h.GetSampleCount() + n
		s := h.GetSampleSum() + float64(n)*secs
		h.SampleCount, h.SampleSum = &c, &s
		for _, b := range h.GetBucket() {
			if b.GetUpperBound() >= secs {
				v := b.GetCumulativeCount() + n
				b.CumulativeCount = &v
			}
		}
	}
}

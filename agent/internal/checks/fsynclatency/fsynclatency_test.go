package fsynclatency

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/cozystack/cozy-health/agent/internal/checkkit"
	"github.com/cozystack/cozy-health/agent/internal/sources/etcdmetrics"
	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/talos"
	"github.com/cozystack/cozy-health/test/harness"
	"github.com/cozystack/cozy-health/test/sources/machined"
)

func defaults() Thresholds {
	return Thresholds{WALFsyncDegraded: 500 * time.Millisecond, WALFsyncDown: time.Second, BackendCommitDegraded: 250 * time.Millisecond, BackendCommitDown: 500 * time.Millisecond}
}

func sample(t testing.TB) []byte {
	b, err := os.ReadFile("testdata/etcd-metrics-v3.4.3.prom")
	require.NoError(t, err)
	return b
}

func TestParseRealEtcdSample(t *testing.T) {
	hs, err := Parse(sample(t))
	require.NoError(t, err)
	wal := hs[WALFsyncMetric]
	assert.Equal(t, uint64(3745994), wal.Count)
	require.Len(t, wal.Buckets, 15)
	// p99 falls in (0.064, 0.128]: 0.064 + 0.064*(3708534.06-3688871)/(3712177-3688871).
	assert.InDelta(t, 0.1180, wal.Quantile(0.99), 0.0005)
	assert.InDelta(t, 0.1959, hs[BackendCommitMetric].Quantile(0.99), 0.0005)
}

func TestQuantileEdges(t *testing.T) {
	assert.Equal(t, 0.0, Histogram{}.Quantile(0.99))
	inf := Histogram{Count: 10, Buckets: []Bucket{{0.001, 0}, {0.002, 0}, {math.Inf(1), 10}}}
	assert.Equal(t, 0.002, inf.Quantile(0.99), "in +Inf: the highest finite bound")
	one := Histogram{Count: 100, Buckets: []Bucket{{0.001, 100}, {math.Inf(1), 100}}}
	assert.InDelta(t, 0.00099, one.Quantile(0.99), 1e-9)
}

func TestSubDeltaAndReset(t *testing.T) {
	prev := Histogram{Count: 10, Buckets: []Bucket{{0.001, 10}, {1, 10}, {math.Inf(1), 10}}}
	cur := Histogram{Count: 20, Buckets: []Bucket{{0.001, 10}, {1, 20}, {math.Inf(1), 20}}}
	d := cur.Sub(prev)
	assert.Equal(t, uint64(10), d.Count)
	assert.InDelta(t, 0.99*0.999+0.001, d.Quantile(0.99), 0.01, "all new samples are slow")
	// etcd restarted: counts went down, the whole current histogram is used.
	assert.Equal(t, prev, prev.Sub(cur))
}

// TestCheckDeltaBetweenScrapes: the first scrape judges the cumulative
// histogram, the next only what happened in between.
func TestCheckDeltaBetweenScrapes(t *testing.T) {
	var mu sync.Mutex
	body := string(sample(t))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	c := New(etcdmetrics.New(srv.URL, 0), nil, defaults())
	obs, err := c.Run(context.Background())
	require.NoError(t, err)
	require.Len(t, obs, 1)
	assert.Equal(t, report.StatusHealthy, obs[0].Status, obs[0].Message)
	assert.InDelta(t, 0.118, obs[0].Attributes[report.AttrWALFsyncP99Seconds], 0.001)

	// 1000 new fsyncs, all between 1.024 s and 2.048 s.
	mu.Lock()
	body = bumpSlow(body, "etcd_disk_wal_fsync_duration_seconds", 2.048, 1000)
	mu.Unlock()
	obs, err = c.Run(context.Background())
	require.NoError(t, err)
	assert.Equal(t, report.StatusDown, obs[0].Status, obs[0].Message)
	assert.Equal(t, "FsyncLatencyHigh", obs[0].Reason)
	assert.Greater(t, obs[0].Attributes[report.AttrWALFsyncP99Seconds], 1.0)

	// Nothing new: p99 over an empty delta is 0, Healthy.
	obs, err = c.Run(context.Background())
	require.NoError(t, err)
	assert.Equal(t, report.StatusHealthy, obs[0].Status)
}

// bumpSlow adds n observations to every bucket of name with le >= bound.
func bumpSlow(body, name string, bound float64, n int) string {
	var out []string
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, name+"_bucket{") || strings.HasPrefix(line, name+"_count") {
			fields := strings.Fields(line)
			var v float64
			_, _ = fmt.Sscan(fields[1], &v)
			add := strings.HasPrefix(line, name+"_count")
			if !add {
				var le float64
				leStr := line[strings.Index(line, `le="`)+4 : strings.LastIndex(line, `"`)]
				if leStr == "+Inf" {
					add = true
				} else if _, err := fmt.Sscan(leStr, &le); err == nil && le >= bound {
					add = true
				}
			}
			if add {
				line = fmt.Sprintf("%s %g", fields[0], v+float64(n))
			}
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}

func TestThresholdsAreConfiguration(t *testing.T) {
	th := defaults()
	th.BackendCommitDegraded = 100 * time.Millisecond
	c := New(etcdmetrics.New("", 0), nil, th)
	hs, err := Parse(sample(t))
	require.NoError(t, err)
	o := c.judge(hs[WALFsyncMetric], hs[BackendCommitMetric])
	assert.Equal(t, report.StatusDegraded, o.Status)
	assert.Equal(t, "BackendCommitLatencyHigh", o.Reason)
}

func TestRealEtcdMember(t *testing.T) {
	cluster := harness.StartEtcdClusterT(t, 1)
	// The judgement of real latencies is the other tests' business: a real
	// disk on a loaded CI machine may really be slow for a few fsyncs, so the
	// thresholds here are far out of reach and the test is about reading a
	// real etcd 3.7 member's metrics.
	th := defaults()
	th.WALFsyncDegraded, th.WALFsyncDown = time.Minute, 2*time.Minute
	th.BackendCommitDegraded, th.BackendCommitDown = time.Minute, 2*time.Minute
	c := New(etcdmetrics.New(cluster.Members[0].MetricsURL, 0), nil, th)
	obs, err := c.Run(context.Background())
	require.NoError(t, err)
	require.Len(t, obs, 1)
	assert.Equal(t, report.StatusHealthy, obs[0].Status, obs[0].Message)
	assert.Contains(t, obs[0].Message, "WAL fsync p99")
	assert.Greater(t, obs[0].Attributes[report.AttrWALFsyncP99Seconds], 0.0, "a p99 from the real histogram")
	hs, err := Parse(fetch(t, cluster.Members[0].MetricsURL))
	require.NoError(t, err)
	assert.NotZero(t, hs[WALFsyncMetric].Count, "a real etcd member has fsynced its WAL")
	assert.Len(t, hs[WALFsyncMetric].Buckets, 15, "etcd 3.7 keeps 14 buckets + Inf")
}

func fetch(t *testing.T, url string) []byte {
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return []byte(b.String())
}

func TestBadSources(t *testing.T) {
	garbage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("etcd_disk_wal_fsync_duration_seconds{{{ not metrics\n"))
	}))
	defer garbage.Close()
	_, err := New(etcdmetrics.New(garbage.URL, 0), nil, defaults()).Run(context.Background())
	require.Error(t, err)
	assert.NotErrorIs(t, err, checkkit.ErrNotApplicable)

	wrongType := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("# TYPE etcd_disk_wal_fsync_duration_seconds gauge\netcd_disk_wal_fsync_duration_seconds 1\n"))
	}))
	defer wrongType.Close()
	_, err = New(etcdmetrics.New(wrongType.URL, 0), nil, defaults()).Run(context.Background())
	require.ErrorContains(t, err, "want a histogram")

	hang := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer hang.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = New(etcdmetrics.New(hang.URL, 0), nil, defaults()).Run(ctx)
	require.Error(t, err)
	assert.Less(t, time.Since(start), 2*time.Second)

	_, err = New(etcdmetrics.New("", 0), nil, defaults()).Run(context.Background())
	require.ErrorIs(t, err, checkkit.ErrNotApplicable)
	// Nothing listens there and no talosconfig to tell whether etcd runs
	// here: not applicable (the Talos case is TestMetricsEndpointAbsent).
	_, err = New(etcdmetrics.New("http://127.0.0.1:1/metrics", 0), nil, defaults()).Run(context.Background())
	require.ErrorIs(t, err, checkkit.ErrNotApplicable)
}

func FuzzParse(f *testing.F) {
	f.Add(sample(f))
	f.Add([]byte("# TYPE etcd_disk_wal_fsync_duration_seconds histogram\netcd_disk_wal_fsync_duration_seconds_bucket{le=\"+Inf\"} 1\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, b []byte) {
		if kept, err := Filter(strings.NewReader(string(b))); err == nil {
			_, _ = Parse(kept)
		}
		hs, err := Parse(b)
		if err != nil {
			return
		}
		for _, h := range hs {
			q := h.Quantile(0.99)
			if q < 0 {
				t.Fatalf("negative quantile %v", q)
			}
			_ = h.Sub(h)
		}
	})
}

func TestFilterKeepsOnlyTheHistograms(t *testing.T) {
	full := sample(t)
	kept, err := Filter(strings.NewReader(string(full)))
	require.NoError(t, err)
	assert.Less(t, len(kept), len(full)/3)
	a, err := Parse(full)
	require.NoError(t, err)
	b, err := Parse(kept)
	require.NoError(t, err)
	assert.Equal(t, a, b)
}

// talosFor serves a Talos MachineService shim for one node (etcdEndpoint ""
// makes it a worker) and returns the agent's client for it.
func talosFor(t *testing.T, etcdEndpoint string) *talos.Client {
	t.Helper()
	pki, err := machined.NewPKI([]string{"127.0.0.1"}, []string{"os:reader"}, time.Hour)
	require.NoError(t, err)
	srv, err := machined.New(machined.Config{Hostname: "node-1", EtcdEndpoint: etcdEndpoint, TLS: pki.ServerTLS()})
	require.NoError(t, err)
	addr, err := srv.Listen("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	cfg := filepath.Join(t.TempDir(), "talosconfig")
	require.NoError(t, pki.WriteTalosconfig(cfg, []string{addr}))
	c, err := talos.New(talos.Config{ConfigFile: cfg}, zaptest.NewLogger(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestMetricsEndpointAbsent: nothing answers at the metrics URL. On a node
// where Talos runs etcd that is Unknown naming the missing patch; on a worker
// (no etcd service) it is not applicable; with etcd stopped it says so.
func TestMetricsEndpointAbsent(t *testing.T) {
	cluster := harness.StartEtcdClusterT(t, 1)
	addr, err := harness.FreeAddr()
	require.NoError(t, err)
	absent := "http://" + addr + "/metrics"

	cp := talosFor(t, cluster.Members[0].ClientURL)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	obs, err := New(etcdmetrics.New(absent, 0), cp, defaults()).Run(ctx)
	require.NoError(t, err)
	require.Len(t, obs, 1)
	assert.Equal(t, report.StatusUnknown, obs[0].Status)
	assert.Equal(t, ReasonMetricsEndpointUnreachable, obs[0].Reason)
	assert.Contains(t, obs[0].Message, "listen-metrics-urls: http://127.0.0.1:2381")
	assert.Contains(t, obs[0].Message, absent)

	worker := talosFor(t, "")
	_, err = New(etcdmetrics.New(absent, 0), worker, defaults()).Run(ctx)
	require.ErrorIs(t, err, checkkit.ErrNotApplicable)
	assert.ErrorContains(t, err, "no etcd service")

	// The metrics URL answers: the Talos client is not even asked.
	obs, err = New(etcdmetrics.New(cluster.Members[0].MetricsURL, 0), worker, defaults()).Run(ctx)
	require.NoError(t, err)
	assert.Contains(t, obs[0].Message, "WAL fsync p99")

	// etcd stopped: Talos reports its service Failed; the metrics are
	// absent because etcd does not run, not for want of the patch.
	require.NoError(t, cluster.StopMember(0))
	// A new client: the agent's shares one ServiceList per interval.
	cp = talosFor(t, cluster.Members[0].ClientURL)
	obs, err = New(etcdmetrics.New(absent, 0), cp, defaults()).Run(ctx)
	require.NoError(t, err)
	require.Len(t, obs, 1)
	assert.Equal(t, report.StatusUnknown, obs[0].Status)
	assert.Equal(t, ReasonEtcdNotRunning, obs[0].Reason, obs[0].Message)
}

// The patch the reason names is the one shipped in talos/manifests.
func TestMetricsPatchShipped(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(harness.RepoRoot(), "talos", "manifests", "etcd-metrics-patch.yaml"))
	require.NoError(t, err)
	assert.Contains(t, string(b), "listen-metrics-urls: http://127.0.0.1:2381")
	assert.Contains(t, MetricsPatch, "listen-metrics-urls: http://127.0.0.1:2381")
}

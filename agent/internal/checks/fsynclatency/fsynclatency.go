// Package fsynclatency judges etcd's disk from etcd's own histograms:
// the p99 of etcd_disk_wal_fsync_duration_seconds and
// etcd_disk_backend_commit_duration_seconds over the delta between two
// scrapes (the cumulative histogram on the first scrape).
//
// Talos starts etcd without a plain-HTTP metrics listener; the metrics URL
// exists only where the operator patched `cluster.etcd.extraArgs.
// listen-metrics-urls`. When nothing answers there, the check asks Talos
// whether etcd runs on this node: on a node without etcd the check is not
// applicable; on a node with etcd the latency is Unknown, with a reason
// naming the missing patch, never silently absent.
package fsynclatency

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/cozystack/cozy-health/agent/internal/checkkit"
	"github.com/cozystack/cozy-health/agent/internal/sources/etcdmetrics"
	"github.com/cozystack/cozy-health/agent/internal/sources/httpsource"
	"github.com/cozystack/cozy-health/agent/internal/sources/machineapi"
	"github.com/cozystack/cozy-health/agent/internal/sources/noderole"
	"github.com/cozystack/cozy-health/pkg/report"
)

// Metric names read from etcd.
const (
	WALFsyncMetric      = etcdmetrics.WALFsyncMetric
	BackendCommitMetric = etcdmetrics.BackendCommitMetric
)

// Reasons of an etcd whose metrics cannot be read.
const (
	// ReasonMetricsEndpointUnreachable: etcd runs on this node but nothing
	// answers at the metrics URL (listen-metrics-urls not set).
	ReasonMetricsEndpointUnreachable = "MetricsEndpointUnreachable"
	// ReasonEtcdNotRunning: the Talos etcd service exists but does not run,
	// so there are no metrics to read (the etcd-member check says why).
	ReasonEtcdNotRunning = "EtcdNotRunning"
)

// MetricsPatch is the Talos machine-config patch that gives etcd a
// plain-HTTP metrics listener on the node's loopback.
const MetricsPatch = "cluster.etcd.extraArgs.listen-metrics-urls: http://127.0.0.1:2381"

// Thresholds configure the check.
type Thresholds struct {
	WALFsyncDegraded, WALFsyncDown           time.Duration
	BackendCommitDegraded, BackendCommitDown time.Duration
}

// Check is the fsync-latency check.
type Check struct {
	// metrics reads etcd's exposition, shared with the etcd-member check.
	metrics *etcdmetrics.Reader
	url     string
	th      Thresholds
	// talos tells whether etcd runs here when the metrics URL is silent;
	// nil when no talosconfig is configured.
	talos *machineapi.Client
	// roles tells a control-plane node when Talos cannot be asked.
	roles *noderole.Reader

	// mu guards prev, the buckets of the previous scrape by metric name.
	mu   sync.Mutex
	prev map[string]Histogram
}

var _ checkkit.Check = (*Check)(nil)

// New returns the check reading etcd's metrics through m (shared with the
// etcd-member check); tc (may be nil) tells whether etcd runs on this node
// when nothing answers at m's URL.
func New(m *etcdmetrics.Reader, tc *machineapi.Client, th Thresholds) *Check {
	return &Check{metrics: m, url: m.URL(), th: th, talos: tc, prev: map[string]Histogram{}}
}

// WithRoles sets where the node's role is read when the Talos API cannot
// be asked (see machineapi.RequireEtcd); nil knows nothing.
func (c *Check) WithRoles(r *noderole.Reader) *Check {
	c.roles = r
	return c
}

// Name implements checkkit.Check.
func (*Check) Name() string { return report.CheckFsyncLatency }

// Component implements checkkit.Check.
func (*Check) Component() string { return report.ComponentEtcd }

// Run implements checkkit.Check.
func (c *Check) Run(ctx context.Context) ([]report.Observation, error) {
	if c.url == "" {
		return nil, checkkit.NotApplicable("no etcd metrics URL configured")
	}
	fams, err := c.metrics.Read(ctx)
	if err != nil {
		if httpsource.IsAbsent(err) {
			return c.absent(ctx, err)
		}
		return nil, fmt.Errorf("read etcd metrics: %w", err)
	}
	hs, err := Histograms(fams)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	wal := hs[WALFsyncMetric].Sub(c.prev[WALFsyncMetric])
	commit := hs[BackendCommitMetric].Sub(c.prev[BackendCommitMetric])
	c.prev = hs
	return checkkit.Stamp(c, c.judge(wal, commit)), nil
}

// absent judges a metrics URL where nothing listens: not applicable where
// Talos says there is no etcd, Unknown where etcd runs.
func (c *Check) absent(ctx context.Context, cause error) ([]report.Observation, error) {
	svc, err := machineapi.RequireEtcd(ctx, c.talos, c.roles)
	if errors.Is(err, checkkit.ErrNotApplicable) {
		return nil, checkkit.NotApplicable(fmt.Sprintf("no etcd metrics at %s (%v) and %v", c.url, cause, err))
	}
	if err != nil {
		return nil, fmt.Errorf("read etcd metrics: nothing answers at %s and Talos cannot tell whether etcd runs here: %w", c.url, err)
	}
	if svc.GetState() != "Running" {
		return checkkit.Stamp(c, report.Observation{Status: report.StatusUnknown, Reason: ReasonEtcdNotRunning,
			Message: fmt.Sprintf("no etcd metrics at %s: %s", c.url, machineapi.Describe(svc))}), nil
	}
	// The fix first: consumers see the message cut at 256 characters.
	return checkkit.Stamp(c, report.Observation{Status: report.StatusUnknown, Reason: ReasonMetricsEndpointUnreachable,
		Message: fmt.Sprintf("nothing answers at %s though etcd runs here (Talos service %s): set %s on control-plane nodes (talos/manifests/etcd-metrics-patch.yaml); "+
			"WAL fsync and backend commit latency unknown until then (%v)",
			c.url, machineapi.Describe(svc), MetricsPatch, cause)}), nil
}

func (c *Check) judge(wal, commit Histogram) report.Observation {
	walP99, commitP99 := wal.Quantile(0.99), commit.Quantile(0.99)
	o := report.Observation{
		Attributes: map[string]float64{
			report.AttrWALFsyncP99Seconds:      walP99,
			report.AttrBackendCommitP99Seconds: commitP99,
		},
	}
	secs := func(d time.Duration) float64 { return d.Seconds() }
	o.Status, o.Reason = report.StatusHealthy, "FsyncLatencyNormal"
	switch {
	case walP99 > secs(c.th.WALFsyncDown):
		o.Status, o.Reason = report.StatusDown, "FsyncLatencyHigh"
	case commitP99 > secs(c.th.BackendCommitDown):
		o.Status, o.Reason = report.StatusDown, "BackendCommitLatencyHigh"
	case walP99 > secs(c.th.WALFsyncDegraded):
		o.Status, o.Reason = report.StatusDegraded, "FsyncLatencyHigh"
	case commitP99 > secs(c.th.BackendCommitDegraded):
		o.Status, o.Reason = report.StatusDegraded, "BackendCommitLatencyHigh"
	}
	o.Message = fmt.Sprintf("WAL fsync p99 %.4fs over %d fsyncs (degraded > %s, down > %s); backend commit p99 %.4fs over %d commits (degraded > %s, down > %s)",
		walP99, wal.Count, c.th.WALFsyncDegraded, c.th.WALFsyncDown, commitP99, commit.Count, c.th.BackendCommitDegraded, c.th.BackendCommitDown)
	return o
}

// Filter keeps the exposition lines of the two histograms.
func Filter(r io.Reader) ([]byte, error) {
	return etcdmetrics.Filter(r, WALFsyncMetric, BackendCommitMetric)
}

// Bucket is one cumulative histogram bucket.
type Bucket struct {
	UpperBound float64
	Count      uint64
}

// Histogram is a cumulative histogram, buckets sorted by upper bound.
type Histogram struct {
	Buckets []Bucket
	Count   uint64
}

// Parse reads the two etcd disk histograms out of a Prometheus text
// exposition (see Histograms).
func Parse(body []byte) (map[string]Histogram, error) {
	fams, err := etcdmetrics.Parse(body)
	if err != nil {
		return nil, err
	}
	return Histograms(fams)
}

// Histograms reads the two etcd disk histograms out of parsed families. A
// family that is absent yields an empty histogram; a family of the wrong
// type is an error. Series with labels are summed.
func Histograms(fams etcdmetrics.Families) (map[string]Histogram, error) {
	out := map[string]Histogram{}
	for _, name := range []string{WALFsyncMetric, BackendCommitMetric} {
		f, ok := fams[name]
		if !ok {
			continue
		}
		if f.GetType() != dto.MetricType_HISTOGRAM {
			return nil, fmt.Errorf("parse etcd metrics: %s is a %s, want a histogram", name, f.GetType())
		}
		out[name] = sumHistograms(f.GetMetric())
	}
	return out, nil
}

func sumHistograms(ms []*dto.Metric) Histogram {
	byBound := map[float64]uint64{}
	var h Histogram
	for _, m := range ms {
		hist := m.GetHistogram()
		h.Count += hist.GetSampleCount()
		for _, b := range hist.GetBucket() {
			byBound[b.GetUpperBound()] += b.GetCumulativeCount()
		}
	}
	for ub, n := range byBound {
		h.Buckets = append(h.Buckets, Bucket{UpperBound: ub, Count: n})
	}
	sort.Slice(h.Buckets, func(i, j int) bool { return h.Buckets[i].UpperBound < h.Buckets[j].UpperBound })
	return h
}

// Sub returns h - prev bucket by bucket. When prev is empty, has other
// buckets, or any count went down (etcd restarted), h is returned whole.
func (h Histogram) Sub(prev Histogram) Histogram {
	if len(prev.Buckets) != len(h.Buckets) || prev.Count > h.Count {
		return h
	}
	out := Histogram{Count: h.Count - prev.Count, Buckets: make([]Bucket, len(h.Buckets))}
	for i, b := range h.Buckets {
		p := prev.Buckets[i]
		if p.UpperBound != b.UpperBound || p.Count > b.Count {
			return h
		}
		out.Buckets[i] = Bucket{UpperBound: b.UpperBound, Count: b.Count - p.Count}
	}
	return out
}

// Quantile estimates the q-quantile the way Prometheus' histogram_quantile
// does: linear interpolation inside the bucket; the highest finite bound
// when it falls into +Inf. It is 0 for an empty histogram.
func (h Histogram) Quantile(q float64) float64 {
	total := h.Count
	if n := len(h.Buckets); n > 0 && h.Buckets[n-1].Count > total {
		total = h.Buckets[n-1].Count
	}
	if total == 0 || len(h.Buckets) == 0 {
		return 0
	}
	rank := q * float64(total)
	lower, prevCount := 0.0, uint64(0)
	for _, b := range h.Buckets {
		if float64(b.Count) >= rank {
			if math.IsInf(b.UpperBound, 1) {
				return lower
			}
			inBucket := float64(b.Count - prevCount)
			if inBucket <= 0 {
				return b.UpperBound
			}
			return lower + (b.UpperBound-lower)*(rank-float64(prevCount))/inBucket
		}
		lower, prevCount = b.UpperBound, b.Count
		if math.IsInf(lower, 1) {
			break
		}
	}
	return lower
}

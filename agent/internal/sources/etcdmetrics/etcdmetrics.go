// Package etcdmetrics reads etcd's own Prometheus exposition (the
// listen-metrics-urls endpoint) once for every check of an interval that
// needs it: the fsync-latency check reads the disk histograms, the
// etcd-member check the backend quota. One scrape is shared by the callers
// that arrive while it runs or shortly after (ShareFor), so the node's etcd
// is asked once per interval, not once per check.
package etcdmetrics

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/cozystack/cozy-health/agent/internal/sources/httpsource"
)

// Metric names the agent reads from etcd (etcd v3.6: server/storage/wal,
// server/storage/backend and server/storage/metrics.go).
const (
	WALFsyncMetric      = "etcd_disk_wal_fsync_duration_seconds"
	BackendCommitMetric = "etcd_disk_backend_commit_duration_seconds"
	// QuotaMetric is etcd's current backend quota in bytes (the effective
	// --quota-backend-bytes; etcd's default 2 GiB when the flag is 0).
	QuotaMetric = "etcd_server_quota_backend_bytes"
)

// Names are the families a Reader keeps; every other line is dropped
// before parsing.
var Names = []string{WALFsyncMetric, BackendCommitMetric, QuotaMetric}

// DefaultShareFor is how long a scrape is reused: the checks of one report
// interval run together.
const DefaultShareFor = time.Second

// ErrNoURL is returned by Read when no metrics URL is configured.
var ErrNoURL = errors.New("no etcd metrics URL configured")

// Families are parsed metric families by name.
type Families map[string]*dto.MetricFamily

// Reader scrapes one etcd metrics URL, sharing each scrape between callers.
type Reader struct {
	url      string
	client   *http.Client
	shareFor time.Duration

	// mu guards cur, the latest scrape (in flight or finished).
	mu  sync.Mutex
	cur *scrape
}

type scrape struct {
	done chan struct{}
	fams Families
	err  error
	at   time.Time
}

// New returns a Reader of url ("" disables: Read returns ErrNoURL). A
// successful scrape is reused for shareFor; a scrape in flight is always
// shared.
func New(url string, shareFor time.Duration) *Reader {
	return &Reader{url: url, client: httpsource.NewClient(), shareFor: shareFor}
}

// URL is the scraped URL ("" for a nil Reader).
func (r *Reader) URL() string {
	if r == nil {
		return ""
	}
	return r.url
}

// Read returns the families of Names from a scrape in flight, one younger
// than shareFor, or a new one. A waiter gives up when its own ctx ends.
// Errors are httpsource's (httpsource.IsAbsent tells "nothing listens").
func (r *Reader) Read(ctx context.Context) (Families, error) {
	if r == nil || r.url == "" {
		return nil, ErrNoURL
	}
	r.mu.Lock()
	if c := r.cur; c != nil {
		select {
		case <-c.done:
			if c.err == nil && time.Since(c.at) < r.shareFor {
				r.mu.Unlock()
				return c.fams, nil
			}
		default:
			r.mu.Unlock()
			select {
			case <-c.done:
				return c.fams, c.err
			case <-ctx.Done():
				return nil, fmt.Errorf("read etcd metrics: %w", ctx.Err())
			}
		}
	}
	c := &scrape{done: make(chan struct{})}
	r.cur = c
	r.mu.Unlock()

	c.fams, c.err = r.fetch(ctx)
	c.at = time.Now()
	close(c.done)
	return c.fams, c.err
}

func (r *Reader) fetch(ctx context.Context) (Families, error) {
	var body []byte
	err := httpsource.Stream(ctx, r.client, r.url, func(rd io.Reader) error {
		var err error
		body, err = Filter(rd, Names...)
		return err
	})
	if err != nil {
		return nil, err
	}
	return Parse(body)
}

// Filter keeps the exposition lines of the named families. etcd serves
// about 1,700 lines (170 KB); handing the parser only the few dozen it
// needs keeps the checks cheap on every interval.
func Filter(r io.Reader, names ...string) ([]byte, error) {
	var prefixes [][]byte
	for _, n := range names {
		prefixes = append(prefixes, []byte(n), []byte("# HELP "+n+" "), []byte("# TYPE "+n+" "))
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	var out bytes.Buffer
	for sc.Scan() {
		line := sc.Bytes()
		for _, p := range prefixes {
			if bytes.HasPrefix(line, p) {
				out.Write(line)
				out.WriteByte('\n')
				break
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("scan etcd metrics: %w", err)
	}
	return out.Bytes(), nil
}

// Parse parses a Prometheus text exposition.
func Parse(body []byte) (Families, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("parse etcd metrics: %w", err)
	}
	return fams, nil
}

// Quota returns etcd's backend quota from QuotaMetric; ok is false when the
// family is absent, of another type, or not a positive number (nothing to
// trust), and why then says which.
func Quota(fams Families) (bytes int64, ok bool, why string) {
	f, found := fams[QuotaMetric]
	switch {
	case !found || len(f.GetMetric()) == 0:
		return 0, false, QuotaMetric + " absent"
	case f.GetType() != dto.MetricType_GAUGE:
		return 0, false, fmt.Sprintf("%s is a %s, want a gauge", QuotaMetric, f.GetType())
	}
	v := f.GetMetric()[0].GetGauge().GetValue()
	if !(v > 0) || v > 1<<50 {
		return 0, false, fmt.Sprintf("%s is %v", QuotaMetric, v)
	}
	return int64(v), true, ""
}

package app

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cozystack/cozy-health/pkg/client/clientset/versioned"
	"github.com/cozystack/cozy-health/pkg/report"
)

// scrape parses a replica's /metrics.
func scrapeFamilies(t require.TestingT, a *App) map[string]*dtoFamily {
	body := httpGetT(t, "http://"+a.MetricsAddr()+"/metrics")
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	require.NoError(t, err)
	out := map[string]*dtoFamily{}
	for name, f := range fams {
		df := &dtoFamily{}
		for _, m := range f.GetMetric() {
			ls := map[string]string{}
			for _, l := range m.GetLabel() {
				ls[l.GetName()] = l.GetValue()
			}
			df.series = append(df.series, dtoSeries{labels: ls, value: m.GetGauge().GetValue()})
		}
		out[name] = df
	}
	return out
}

type dtoSeries struct {
	labels map[string]string
	value  float64
}

type dtoFamily struct{ series []dtoSeries }

func httpGetT(t require.TestingT, url string) string {
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	return string(b)
}

// TestMonitoringSeries: what the alert rules read, on the real apiserver.
// Every replica, the leader and a follower alike, exports each Health
// object's freshUntil as the apiserver holds it (the watchdog's view from
// outside the writer), and the leader and follower export the published
// conditions that are not True with node, type and reason
// (cozy_health_issue); a recovery takes them away.
func TestMonitoringSeries(t *testing.T) {
	cp := startPlane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, n := range []string{"node-a", "node-b"} {
		_, err := cp.Clientset().CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	hc, err := versioned.NewForConfig(cp.Config)
	require.NoError(t, err)
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))

	leader := startReplica(t, cp.Config, testConfig(t, "replica-1"), log)
	require.Eventually(t, func() bool { return leaseHolder(ctx, cp) == "replica-1" }, time.Minute, 100*time.Millisecond)
	follower := startReplica(t, cp.Config, testConfig(t, "replica-2"), log)
	f, _ := feed(ctx, t, map[string]report.Status{"node-a": report.StatusHealthy, "node-b": report.StatusHealthy}, leader.app, follower.app)

	// freshUntil of every object, as the apiserver holds it, on both.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		list, err := hc.HealthV1alpha1().Healths(testNS).List(ctx, metav1.ListOptions{})
		if !assert.NoError(c, err) || !assert.Len(c, list.Items, len(report.NodeComponents)) {
			return
		}
		want := map[string]float64{}
		for _, h := range list.Items {
			if assert.NotNil(c, h.Status.FreshUntil, h.Name) {
				want[h.Name] = float64(h.Status.FreshUntil.Unix())
			}
		}
		for _, r := range []*replica{leader, follower} {
			got := map[string]float64{}
			fam := scrapeFamilies(c, r.app)["cozy_health_health_fresh_until_timestamp_seconds"]
			if !assert.NotNil(c, fam, r.app.cfg.Identity) {
				return
			}
			for _, s := range fam.series {
				assert.Equal(c, testNS, s.labels["namespace"])
				got[s.labels["component"]] = float64(int64(s.value))
			}
			assert.Equal(c, want, got, r.app.cfg.Identity)
		}
	}, time.Minute, 250*time.Millisecond)

	// node-b's disk goes Down: both replicas export the issue, pinned.
	f.set("node-b", report.StatusDown)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, r := range []*replica{leader, follower} {
			fam := scrapeFamilies(c, r.app)["cozy_health_issue"]
			if !assert.NotNil(c, fam, r.app.cfg.Identity) {
				return
			}
			var pinned, summary bool
			for _, s := range fam.series {
				l := s.labels
				if l["component"] != report.ComponentDisk {
					continue
				}
				assert.Equal(c, testNS, l["namespace"])
				assert.Equal(c, "Down", l["status"])
				assert.Equal(c, "FsyncProbe", l["type"])
				switch l["node"] {
				case "node-b":
					pinned = true
					assert.NotEmpty(c, l["reason"])
				case "":
					summary = true
				default:
					assert.Fail(c, "a healthy node has no issue", "%v", l)
				}
			}
			assert.True(c, pinned && summary, "%s: the node's condition and the type summary", r.app.cfg.Identity)
		}
	}, 30*time.Second, 250*time.Millisecond)

	// It recovers: the disk's issues are gone.
	f.set("node-b", report.StatusHealthy)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, r := range []*replica{leader, follower} {
			for _, s := range scrapeFamilies(c, r.app)["cozy_health_issue"].seriesOrNil() {
				assert.NotEqual(c, report.ComponentDisk, s.labels["component"], "%v", s.labels)
			}
		}
	}, 30*time.Second, 250*time.Millisecond)
}

func (f *dtoFamily) seriesOrNil() []dtoSeries {
	if f == nil {
		return nil
	}
	return f.series
}

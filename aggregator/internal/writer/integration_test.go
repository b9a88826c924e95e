package writer

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cozystack/cozy-health/aggregator/internal/metrics"
	healthv1alpha1 "github.com/cozystack/cozy-health/pkg/apis/health/v1alpha1"
	"github.com/cozystack/cozy-health/pkg/client/clientset/versioned"
	"github.com/cozystack/cozy-health/pkg/metrictest"
	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/test/harness"
)

// TestOutOfBoundsConditionsStillWriteAFreshObject, on a real apiserver
// with the Health CRD: reports with a reason over 1,024 bytes, a DRBD
// resource with an empty name and 9,000 check names (badReports) still
// yield valid, fresh Health objects: the writer drops or cuts the
// conditions the CRD refuses, counts them, and writes the rest, instead
// of the apiserver refusing the whole status and the object going stale.
func TestOutOfBoundsConditionsStillWriteAFreshObject(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const ns = "cozy-system"
	_, hc, reg, w := startWriter(ctx, t, ns, zaptest.NewLogger(t))

	start := time.Now()
	for _, cs := range compute(badReports(start), start) {
		w.Publish(ns, cs)
	}
	defer runWriter(ctx, w)()

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, comp := range []string{report.ComponentLinstor, report.ComponentDisk} {
			h, err := hc.HealthV1alpha1().Healths(ns).Get(ctx, comp, metav1.GetOptions{})
			if !assert.NoError(c, err) || !assert.NotNil(c, h.Status.FreshUntil, "%s has a status", comp) {
				return
			}
			assert.True(c, h.Status.FreshUntil.After(start), comp)
			assert.LessOrEqual(c, len(h.Status.Conditions), report.MaxConditions, comp)
		}
	}, time.Minute, 200*time.Millisecond)

	linstor, err := hc.HealthV1alpha1().Healths(ns).Get(ctx, report.ComponentLinstor, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, healthv1alpha1.StatusDown, linstor.Status.Overall, "the judgement stands")
	assert.Equal(t, healthv1alpha1.StatusDown, linstor.Status.Nodes["n1"].Status)
	var cut bool
	for _, c := range linstor.Status.Conditions {
		if c.ResourceRef != nil && c.ResourceRef.Name == "pvc-2" {
			cut = true
			assert.Len(t, c.Reason, report.MaxReason)
		}
	}
	assert.True(t, cut, "the condition with the long reason is written, its reason cut")
	disk, err := hc.HealthV1alpha1().Healths(ns).Get(ctx, report.ComponentDisk, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, healthv1alpha1.StatusDegraded, disk.Status.Nodes["n2"].Status)

	// Counted per write: at least once each.
	assert.GreaterOrEqual(t, bounded(t, reg, metrics.BoundResourceRef), 1.0)
	assert.GreaterOrEqual(t, bounded(t, reg, metrics.BoundReason), 1.0)
	assert.Positive(t, bounded(t, reg, metrics.BoundMaxItems)+bounded(t, reg, metrics.BoundSize))
}

// startWriter starts a control plane with the Health CRD and namespace
// ns, and returns it, a client of it, a registry of the writer's metrics
// and a writer (not yet running) that writes there.
func startWriter(ctx context.Context, tb testing.TB, ns string, log *zap.Logger) (*harness.ControlPlane, versioned.Interface, *prometheus.Registry, *Writer) {
	tb.Helper()
	cp := harness.Start(tb)
	require.NoError(tb, cp.InstallCRDs(ctx))
	require.NoError(tb, cp.EnsureNamespace(ctx, ns))
	hc, err := versioned.NewForConfig(cp.Config)
	require.NoError(tb, err)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	require.NoError(tb, err)
	w, err := New(Config{Namespace: ns, FreshFor: 30 * time.Second, RefreshPeriod: time.Minute, WritesPerSecond: 50, WriteBurst: 10,
		BackoffBase: 100 * time.Millisecond, BackoffMax: time.Second}, hc, m, log, nil)
	require.NoError(tb, err)
	return cp, hc, reg, w
}

// runWriter runs w until the function it returns is called.
func runWriter(ctx context.Context, w *Writer) (stop func()) {
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); w.Run(runCtx) }()
	return func() { cancel(); <-done }
}

// bounded is cozy_health_writer_conditions_bounded_total{reason}.
func bounded(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	return counter(t, reg, "cozy_health_writer_conditions_bounded_total", reason)
}

// nodeBounded is cozy_health_writer_node_entries_bounded_total{reason}.
func nodeBounded(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	return counter(t, reg, "cozy_health_writer_node_entries_bounded_total", reason)
}

// counter is the counter name{reason} of reg.
func counter(t *testing.T, reg *prometheus.Registry, name, reason string) float64 {
	t.Helper()
	return metrictest.Value(t, reg, name, "reason", reason)
}

// TestTenThousandSilentNodesAreWritten, on a real apiserver over a real
// etcd with its default request limit (1.5 MiB): when every one of 10,000
// nodes has missed its heartbeat (a partition between the nodes and the
// aggregator), each entry Unknown (ManyNodesSilent: they fell silent
// together) with its message and
// lastReportAt is about 190 bytes, and the whole status (1.9 MB) was
// refused by etcd ("request is too large"), so the object went stale
// instead of naming the silent nodes. Bounded, it is written: every node
// listed Unknown/ManyNodesSilent, messages kept while they fit, the rest
// counted.
func TestTenThousandSilentNodesAreWritten(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const ns = "cozy-system"
	_, hc, reg, w := startWriter(ctx, t, ns, zaptest.NewLogger(t))

	start := time.Now()
	disk := compute(nodeSnapshot(10000, "silent", start), start)[report.ComponentDisk]
	w.Publish(ns, disk)
	defer runWriter(ctx, w)()

	var h *healthv1alpha1.Health
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var err error
		h, err = hc.HealthV1alpha1().Healths(ns).Get(ctx, report.ComponentDisk, metav1.GetOptions{})
		if assert.NoError(c, err) && assert.NotNil(c, h.Status.FreshUntil) {
			assert.True(c, h.Status.FreshUntil.After(start))
		}
	}, 2*time.Minute, 200*time.Millisecond)
	assert.Equal(t, healthv1alpha1.StatusUnknown, h.Status.Overall)
	require.Len(t, h.Status.Nodes, 10000)
	messages := 0
	for name, n := range h.Status.Nodes {
		assert.Equal(t, healthv1alpha1.StatusUnknown, n.Status, name)
		// All 10,000 fell silent together: one event (issue 36).
		assert.Equal(t, report.ReasonManyNodesSilent, n.Reason, name)
		if n.Message != "" {
			messages++
		}
	}
	assert.Positive(t, messages, "messages are kept while they fit")
	assert.Less(t, messages, 10000)
	assert.Equal(t, float64(10000-messages), nodeBounded(t, reg, metrics.BoundNodeMessage), "one write, every message left out counted")
	assert.Zero(t, nodeBounded(t, reg, metrics.BoundNodeOverLimit))
}

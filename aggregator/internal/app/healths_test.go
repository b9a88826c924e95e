package app

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cozystack/cozy-health/aggregator/internal/metrics"
	"github.com/cozystack/cozy-health/aggregator/internal/writer"
	healthv1alpha1 "github.com/cozystack/cozy-health/pkg/apis/health/v1alpha1"
	"github.com/cozystack/cozy-health/pkg/client/clientset/versioned"
	"github.com/cozystack/cozy-health/pkg/metrictest"
)

// TestFreshnessSeriesCoverEveryWrittenObject: the watchdog's series
// (cozy_health_health_fresh_until_timestamp_seconds) exists for every
// Health object the writer writes, a tenant's adapter objects included
// (the watchdog could not fire for a stale tenant application, backup or
// control plane), and only for those: one series per written object,
// dropped with the object.
func TestFreshnessSeriesCoverEveryWrittenObject(t *testing.T) {
	cp := startPlane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	hc, err := versioned.NewForConfig(cp.Config)
	require.NoError(t, err)
	for _, ns := range []string{"tenant-foo", "tenant-bar"} {
		_, err := cp.Clientset().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	fresh := time.Now().Add(10 * time.Minute).Truncate(time.Second)
	put := func(ns, name string, labels map[string]string) {
		t.Helper()
		h, err := hc.HealthV1alpha1().Healths(ns).Create(ctx, &healthv1alpha1.Health{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
			Spec:       healthv1alpha1.HealthSpec{Component: name},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		now := metav1.Now()
		h.Status = healthv1alpha1.HealthStatus{Overall: healthv1alpha1.StatusHealthy, ObservedAt: &now, FreshUntil: &metav1.Time{Time: fresh}}
		_, err = hc.HealthV1alpha1().Healths(ns).UpdateStatus(ctx, h, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	adapters := map[string]string{writer.SourceLabel: writer.SourceAdapters}
	put(testNS, "etcd", nil)
	put(testNS, "backups", adapters)
	put("tenant-foo", "backups", adapters)
	put("tenant-foo", "control-plane", adapters)
	put("tenant-bar", "apps", adapters)
	put("tenant-bar", "notes", nil) // not the writer's: no series

	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	inf, err := trackHealths(hc, testNS, true, m, zaptest.NewLogger(t))
	require.NoError(t, err)
	go inf.Run(ctx.Done())

	series := func() map[string]float64 {
		out := map[string]float64{}
		for _, s := range metrictest.Series(t, reg, "cozy_health_health_fresh_until_timestamp_seconds") {
			l := metrictest.LabelsOf(s)
			out[l["namespace"]+"/"+l["component"]] = s.GetGauge().GetValue()
		}
		return out
	}
	want := map[string]float64{}
	for _, k := range []string{testNS + "/etcd", testNS + "/backups", "tenant-foo/backups", "tenant-foo/control-plane", "tenant-bar/apps"} {
		want[k] = float64(fresh.Unix())
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, want, series()) }, time.Minute, 100*time.Millisecond)

	// A withdrawn tenant object takes its series with it.
	require.NoError(t, hc.HealthV1alpha1().Healths("tenant-foo").Delete(ctx, "control-plane", metav1.DeleteOptions{}))
	delete(want, "tenant-foo/control-plane")
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, want, series()) }, time.Minute, 100*time.Millisecond)
}

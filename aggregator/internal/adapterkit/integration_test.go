package adapterkit_test

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/cozy-health/aggregator/internal/adapterkit"
	"github.com/cozystack/cozy-health/aggregator/internal/adapters"
	"github.com/cozystack/cozy-health/aggregator/internal/adapters/cnpg"
	"github.com/cozystack/cozy-health/aggregator/internal/adapters/cozybackup"
	"github.com/cozystack/cozy-health/aggregator/internal/adapters/helmrelease"
	"github.com/cozystack/cozy-health/aggregator/internal/adapters/kamaji"
	"github.com/cozystack/cozy-health/aggregator/internal/adapters/velero"
	"github.com/cozystack/cozy-health/aggregator/internal/metrics"
	"github.com/cozystack/cozy-health/aggregator/internal/status"
	"github.com/cozystack/cozy-health/aggregator/internal/writer"
	healthv1alpha1 "github.com/cozystack/cozy-health/pkg/apis/health/v1alpha1"
	"github.com/cozystack/cozy-health/pkg/client/clientset/versioned"
	"github.com/cozystack/cozy-health/pkg/metrictest"
	"github.com/cozystack/cozy-health/test/harness"
)

const platformNS = "cozy-system"

type env struct {
	t   *testing.T
	cp  *harness.ControlPlane
	dyn dynamic.Interface
	hc  versioned.Interface
	// reg is the aggregator's metrics registry (what the alert rules read).
	reg *prometheus.Registry
}

// start brings up a control plane with the Health CRD, the platform and
// tenant namespaces, and a leading writer fed by a Manager whose dynamic
// client is the one setup returns (the admin's when nil).
func start(t *testing.T, cfg adapterkit.Config, setup func(e *env) *rest.Config) *env {
	t.Helper()
	return startWith(t, cfg, setup, adapters.All())
}

// startWith is start with the adapters list.
func startWith(t *testing.T, cfg adapterkit.Config, setup func(e *env) *rest.Config, list []adapterkit.Adapter) *env {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cp := harness.Start(t)
	require.NoError(t, cp.InstallCRDs(ctx))
	e := &env{t: t, cp: cp}
	var err error
	e.dyn, err = dynamic.NewForConfig(cp.Config)
	require.NoError(t, err)
	e.hc, err = versioned.NewForConfig(cp.Config)
	require.NoError(t, err)
	require.NoError(t, cp.EnsureNamespace(ctx, platformNS))
	for _, ns := range []string{"tenant-foo", "tenant-bar"} {
		_, err := cp.Clientset().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
			Labels: map[string]string{"tenant.cozystack.io/tenant-root": "", "tenant.cozystack.io/" + ns: ""}}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	var rc *rest.Config
	if setup != nil {
		rc = setup(e)
	}
	e.reg = prometheus.NewRegistry()
	m, err := metrics.New(e.reg)
	require.NoError(t, err)
	log := zaptest.NewLogger(t)
	w, err := writer.New(writer.Config{Namespace: platformNS, FreshFor: time.Minute, RefreshPeriod: 20 * time.Second,
		WritesPerSecond: 50, WriteBurst: 50}, e.hc, m, log, nil)
	require.NoError(t, err)
	if rc == nil {
		rc = cp.Config
	}
	mdyn, err := dynamic.NewForConfig(rc)
	require.NoError(t, err)
	cfg.Namespace = platformNS
	cfg.Metrics = m
	cfg.Debounce = 100 * time.Millisecond
	if cfg.Period == 0 {
		cfg.Period = 2 * time.Second
	}
	cfg.Ready = w.AdaptersReady
	mgr := adapterkit.NewManager(cfg, mdyn, list, status.Publishers{m, w}, log, nil)
	done := make(chan struct{}, 2)
	go func() { _ = mgr.Run(ctx); done <- struct{}{} }()
	go func() { w.Run(ctx); done <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-done; <-done })
	return e
}

// gauge is the value of the series name{want} in the aggregator's
// metrics (a gauge or a counter; a histogram's sample count); -1 when
// there is no such series.
func (e *env) gauge(name string, want map[string]string) float64 {
	e.t.Helper()
	for _, m := range metrictest.Series(e.t, e.reg, name) {
		if maps.Equal(metrictest.LabelsOf(m), want) {
			return metrictest.ValueOf(m)
		}
	}
	return -1
}

// create creates obj (YAML) and, when it has a status, moves the status in
// through the status subresource as its controller would.
func (e *env) create(gvr schema.GroupVersionResource, doc string) {
	e.t.Helper()
	u := &unstructured.Unstructured{}
	require.NoError(e.t, yaml.Unmarshal([]byte(doc), &u.Object))
	e.createObj(gvr, u)
}

// createObj is create for an object already decoded (a fixture).
func (e *env) createObj(gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
	e.t.Helper()
	ctx := context.Background()
	u = u.DeepCopy()
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	status, hasStatus := u.Object["status"]
	delete(u.Object, "status")
	ri := e.dyn.Resource(gvr).Namespace(u.GetNamespace())
	got, err := ri.Create(ctx, u, metav1.CreateOptions{})
	require.NoError(e.t, err, "create %s %s/%s", gvr.Resource, u.GetNamespace(), u.GetName())
	if hasStatus {
		got.Object["status"] = status
		_, err = ri.UpdateStatus(ctx, got, metav1.UpdateOptions{})
		require.NoError(e.t, err, "update status of %s %s/%s", gvr.Resource, u.GetNamespace(), u.GetName())
	}
}

// createWhole creates obj (YAML) with its status in one request, as for a
// kind without a status subresource.
func (e *env) createWhole(gvr schema.GroupVersionResource, doc string) {
	e.t.Helper()
	u := &unstructured.Unstructured{}
	require.NoError(e.t, yaml.Unmarshal([]byte(doc), &u.Object))
	e.createWholeObj(gvr, u)
}

// createWholeObj is createWhole for an object already decoded (a fixture).
func (e *env) createWholeObj(gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
	e.t.Helper()
	u = u.DeepCopy()
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	_, err := e.dyn.Resource(gvr).Namespace(u.GetNamespace()).Create(context.Background(), u, metav1.CreateOptions{})
	require.NoError(e.t, err, "create %s %s/%s", gvr.Resource, u.GetNamespace(), u.GetName())
}

// setStatus replaces an object's status through the status subresource.
func (e *env) setStatus(gvr schema.GroupVersionResource, ns, name, statusYAML string) {
	e.t.Helper()
	var status map[string]any
	require.NoError(e.t, yaml.Unmarshal([]byte(statusYAML), &status))
	e.setStatusObj(gvr, ns, name, status)
}

// setStatusObj is setStatus with the status already decoded (a fixture's).
func (e *env) setStatusObj(gvr schema.GroupVersionResource, ns, name string, status map[string]any) {
	e.t.Helper()
	ctx := context.Background()
	ri := e.dyn.Resource(gvr).Namespace(ns)
	got, err := ri.Get(ctx, name, metav1.GetOptions{})
	require.NoError(e.t, err)
	got.Object["status"] = status
	_, err = ri.UpdateStatus(ctx, got, metav1.UpdateOptions{})
	require.NoError(e.t, err)
}

// health waits until the Health object ns/name satisfies ok.
func (e *env) health(ns, name string, ok func(h *healthv1alpha1.Health) bool) *healthv1alpha1.Health {
	e.t.Helper()
	var last *healthv1alpha1.Health
	if !assert.Eventually(e.t, func() bool {
		h, err := e.hc.HealthV1alpha1().Healths(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		last = h
		return ok(h)
	}, 30*time.Second, 100*time.Millisecond) {
		e.t.Fatalf("Health %s/%s never matched; last: %s", ns, name, dump(last))
	}
	return last
}

// gone waits until the Health object ns/name does not exist.
func (e *env) gone(ns, name string) {
	e.t.Helper()
	require.Eventually(e.t, func() bool {
		_, err := e.hc.HealthV1alpha1().Healths(ns).Get(context.Background(), name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}, 30*time.Second, 100*time.Millisecond, "Health %s/%s still exists", ns, name)
}

func dump(h *healthv1alpha1.Health) string {
	if h == nil {
		return "none"
	}
	b, _ := yaml.Marshal(h.Status)
	return string(b)
}

func cond(h *healthv1alpha1.Health, typ, name string) *healthv1alpha1.HealthCondition {
	for i, c := range h.Status.Conditions {
		if c.Type == typ && (name == "" || (c.ResourceRef != nil && c.ResourceRef.Name == name)) {
			return &h.Status.Conditions[i]
		}
	}
	return nil
}

func helmRelease(ns, name string, deps ...string) string {
	s := fmt.Sprintf(`apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata:
  name: %s
  namespace: %s
spec:
  interval: 5m
  chart:
    spec:
      chart: %s
      sourceRef:
        kind: HelmRepository
        name: cozystack-system
        namespace: cozy-system
`, name, ns, name)
	if len(deps) > 0 {
		s += "  dependsOn:\n"
		for _, d := range deps {
			s += "  - name: " + d + "\n"
		}
	}
	return s
}

func releaseStatus(ready, reason, msg string) string {
	return fmt.Sprintf(`observedGeneration: 1
conditions:
- type: Ready
  status: "%s"
  reason: %s
  message: %q
  observedGeneration: 1
  lastTransitionTime: "2026-12-01T09:00:00Z"
`, ready, reason, msg)
}

// TestAdaptersOnTheRealAPIServer installs the sources' CRDs while the
// aggregator runs (as Cozystack does), creates objects in their real shapes,
// moves their status through the status subresource and reads the Health
// objects the leader writes: root causes, a cycle, a stale and a failed
// CNPG backup, a Kamaji control plane whose DataStore is not ready, and a
// CRD removed at runtime.
func TestAdaptersOnTheRealAPIServer(t *testing.T) {
	ctx := context.Background()
	e := start(t, adapterkit.Config{BackupMaxAge: map[string]time.Duration{"tenant-foo": 24 * time.Hour}}, nil)
	hr := helmrelease.Source.GVR

	// Nothing installed: nothing to say, no object; the adapters' series
	// say why (not applicable, so not synced either).
	time.Sleep(time.Second)
	_, err := e.hc.HealthV1alpha1().Healths(platformNS).Get(ctx, "platform", metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "platform written without any HelmRelease API: %v", err)
	e.adapterState("helmrelease", 0, 0, 0)
	e.adapterState("cnpg", 0, 0, 0)

	require.NoError(t, e.cp.InstallAdapterCRDs(ctx, "helm.toolkit.fluxcd.io_helmreleases"))
	t.Run("failing release with 3 dependents is one root cause", func(t *testing.T) {
		e.t = t
		e.create(hr, helmRelease(platformNS, "cilium"))
		e.setStatus(hr, platformNS, "cilium", releaseStatus("True", "InstallSucceeded", "Helm install succeeded"))
		e.create(hr, helmRelease(platformNS, "kubeovn", "cilium"))
		e.setStatus(hr, platformNS, "kubeovn", releaseStatus("False", "UpgradeFailed", "Helm upgrade failed for release cozy-system/kubeovn with chart kubeovn@0.30.1: context deadline exceeded"))
		for _, r := range []struct{ name, dep string }{{"cozystack-api", "kubeovn"}, {"dashboard", "cozystack-api"}, {"linstor", "kubeovn"}} {
			e.create(hr, helmRelease(platformNS, r.name, r.dep))
			e.setStatus(hr, platformNS, r.name, releaseStatus("False", "DependencyNotReady", fmt.Sprintf("dependency 'cozy-system/%s' is not ready", r.dep)))
		}
		h := e.health(platformNS, "platform", func(h *healthv1alpha1.Health) bool {
			c := cond(h, helmrelease.TypeReleases, "")
			return c != nil && strings.Contains(c.Message, "3 waiting on it")
		})
		assert.Equal(t, healthv1alpha1.StatusDegraded, h.Status.Overall)
		sum := cond(h, helmrelease.TypeReleases, "")
		assert.Equal(t, "1 of 5 ready; 1 root cause: cozy-system/kubeovn (UpgradeFailed: Helm upgrade failed for release cozy-system/kubeovn with chart kubeovn@0.30.1: context deadline exceeded), 3 waiting on it", sum.Message)
		root := cond(h, helmrelease.TypeRelease, "kubeovn")
		require.NotNil(t, root)
		assert.Equal(t, "UpgradeFailed", root.Reason)
		assert.Equal(t, "HelmRelease.helm.toolkit.fluxcd.io", root.ResourceRef.Kind)
		for _, n := range []string{"cozystack-api", "dashboard", "linstor"} {
			c := cond(h, helmrelease.TypeRelease, n)
			require.NotNil(t, c, n)
			assert.Equal(t, healthv1alpha1.ConditionFalse, c.Status)
			assert.Contains(t, c.Message, "waiting on root cause cozy-system/kubeovn (UpgradeFailed")
		}
		assert.Nil(t, cond(h, helmrelease.TypeRelease, "cilium"), "a ready release has no condition of its own")
		assert.Equal(t, writer.SourceAdapters, h.Labels[writer.SourceLabel])
		// Its CRD present and synced: the adapter's series count its objects.
		e.adapterState("helmrelease", 1, 1, 5)
		assert.Positive(t, e.gauge("cozy_health_adapter_judge_duration_seconds", map[string]string{"adapter": "helmrelease"}), "judgements observed")
		e.adapterState("cnpg", 0, 0, 0)

		// The fix: kubeovn upgrades, its dependents follow.
		e.setStatus(hr, platformNS, "kubeovn", releaseStatus("True", "UpgradeSucceeded", "Helm upgrade succeeded"))
		for _, n := range []string{"cozystack-api", "dashboard", "linstor"} {
			e.setStatus(hr, platformNS, n, releaseStatus("True", "InstallSucceeded", "Helm install succeeded"))
		}
		h = e.health(platformNS, "platform", func(h *healthv1alpha1.Health) bool { return h.Status.Overall == healthv1alpha1.StatusHealthy })
		assert.Equal(t, "5 of 5 ready", cond(h, helmrelease.TypeReleases, "").Message)
	})
	t.Run("dependency cycle in a tenant", func(t *testing.T) {
		e.t = t
		e.create(hr, helmRelease("tenant-foo", "a", "b"))
		e.create(hr, helmRelease("tenant-foo", "b", "a"))
		e.setStatus(hr, "tenant-foo", "a", releaseStatus("False", "DependencyNotReady", "dependency 'tenant-foo/b' is not ready"))
		e.setStatus(hr, "tenant-foo", "b", releaseStatus("False", "DependencyNotReady", "dependency 'tenant-foo/a' is not ready"))
		h := e.health("tenant-foo", "apps", func(h *healthv1alpha1.Health) bool {
			c := cond(h, helmrelease.TypeRelease, "a")
			return c != nil && c.Reason == helmrelease.ReasonDependencyCycle
		})
		assert.Equal(t, "dependency cycle: tenant-foo/a -> tenant-foo/b -> tenant-foo/a", cond(h, helmrelease.TypeRelease, "b").Message)
		assert.Equal(t, healthv1alpha1.StatusDegraded, h.Status.Overall)
	})

	require.NoError(t, e.cp.InstallAdapterCRDs(ctx, "postgresql.cnpg.io_clusters", "postgresql.cnpg.io_backups", "postgresql.cnpg.io_scheduledbackups"))
	t.Run("CNPG backup older than its SLA, then a failed backup", func(t *testing.T) {
		e.t = t
		// Objects marshalled from CNPG's own Go types (test/fixtures).
		now := time.Now().UTC()
		cluster := fixture(t, "cnpg.yaml", "Cluster", "postgres-db", now)
		e.createObj(cnpg.Clusters.GVR, cluster)
		e.createObj(cnpg.ScheduledBackups.GVR, fixture(t, "cnpg.yaml", "ScheduledBackup", "postgres-db-daily", now))
		lastS, _, _ := unstructured.NestedString(cluster.Object, "status", "lastSuccessfulBackup")
		last, err := time.Parse(time.RFC3339, lastS)
		require.NoError(t, err)
		require.InDelta(t, (50 * time.Hour).Seconds(), now.Sub(last).Seconds(), 5, "the fixture's last success is 50 h old")
		h := e.health("tenant-foo", "backups", func(h *healthv1alpha1.Health) bool {
			c := cond(h, "Backup", "postgres-db")
			return c != nil && c.Reason == adapterkit.ReasonBackupStale
		})
		c := cond(h, "Backup", "postgres-db")
		assert.Equal(t, healthv1alpha1.StatusDegraded, h.Status.Overall)
		assert.Equal(t, "Cluster.postgresql.cnpg.io", c.ResourceRef.Kind)
		require.NotNil(t, c.LastSuccessfulAt)
		assert.True(t, c.LastSuccessfulAt.Time.Equal(last), "lastSuccessfulAt %s, want %s", c.LastSuccessfulAt, last)
		require.NotNil(t, c.MaxAge)
		assert.Equal(t, 24*time.Hour, c.MaxAge.Duration, "the namespace's SLA, not the schedule's 36h")
		require.NotNil(t, c.ObservedAge)
		assert.InDelta(t, (50 * time.Hour).Seconds(), c.ObservedAge.Seconds(), 120)
		// What CozyHealthBackupsStale reads (every replica exports it).
		assert.Equal(t, 1.0, e.gauge("cozy_health_component_status", map[string]string{"namespace": "tenant-foo", "component": "backups", "status": "Degraded"}))
		assert.Equal(t, 1.0, e.gauge("cozy_health_issue", map[string]string{"namespace": "tenant-foo", "component": "backups", "node": "",
			"type": "Backup", "kind": "Cluster.postgresql.cnpg.io", "resource": "postgres-db", "reason": adapterkit.ReasonBackupStale, "status": "Degraded"}), "cozy_health_issue names the stale backup")
		require.NotNil(t, h.Spec.SLA)
		require.NotNil(t, h.Spec.SLA.MaxAge)
		assert.Equal(t, 24*time.Hour, h.Spec.SLA.MaxAge.Duration)

		// A Backup failed 9 minutes ago (BackupStatus.SetAsFailed).
		e.createObj(cnpg.Backups.GVR, fixture(t, "cnpg.yaml", "Backup", "postgres-db-daily-now", now))
		h = e.health("tenant-foo", "backups", func(h *healthv1alpha1.Health) bool {
			c := cond(h, "Backup", "postgres-db")
			return c != nil && c.Reason == adapterkit.ReasonBackupFailed
		})
		assert.Contains(t, cond(h, "Backup", "postgres-db").Message, "AccessDenied")
	})

	require.NoError(t, e.cp.InstallAdapterCRDs(ctx, "backups.cozystack.io_plans", "backups.cozystack.io_backupjobs", "backups.cozystack.io_backups"))
	t.Run("Cozystack Plan whose last success is only in its Backup artifacts", func(t *testing.T) {
		e.t = t
		e.create(cozybackup.Plans.GVR, `apiVersion: backups.cozystack.io/v1alpha1
kind: Plan
metadata:
  name: etcd-daily
  namespace: tenant-bar
spec:
  applicationRef: {apiGroup: apps.cozystack.io, kind: Etcd, name: etcd}
  backupClassName: cozy-default
  schedule: {type: cron, cron: "0 2 * * *"}
`)
		// The job that made it is gone (pruned); the artifact stays. Backup
		// has no status subresource: the driver creates it with its status.
		taken := time.Now().UTC().Add(-3 * time.Hour).Truncate(time.Second)
		e.createWhole(cozybackup.Backups.GVR, fmt.Sprintf(`apiVersion: backups.cozystack.io/v1alpha1
kind: Backup
metadata:
  name: etcd-daily-1
  namespace: tenant-bar
spec:
  applicationRef: {apiGroup: apps.cozystack.io, kind: Etcd, name: etcd}
  planRef: {name: etcd-daily}
  strategyRef: {apiGroup: strategy.backups.cozystack.io, kind: Etcd, name: cozy-default-etcd}
  takenAt: %q
status:
  phase: Ready
  artifact: {uri: "s3://cozy-backups/tenant-bar/etcd/etcd-daily-1.db"}
`, taken.Format(time.RFC3339)))
		h := e.health("tenant-bar", "backups", func(h *healthv1alpha1.Health) bool {
			c := cond(h, "Backup", "etcd-daily")
			return c != nil && c.Reason == adapterkit.ReasonBackupRecent
		})
		c := cond(h, "Backup", "etcd-daily")
		assert.Equal(t, "Plan.backups.cozystack.io", c.ResourceRef.Kind)
		require.NotNil(t, c.LastSuccessfulAt)
		assert.True(t, c.LastSuccessfulAt.Time.Equal(taken), "lastSuccessfulAt %s, want the Backup's takenAt %s", c.LastSuccessfulAt, taken)
		e.adapterState("cozystack-backups", 1, 1, 2)
	})

	require.NoError(t, e.cp.InstallAdapterCRDs(ctx, "velero.io_schedules", "velero.io_backups"))
	t.Run("paused velero Schedule, no SLA, last success 180 days ago: ScheduleSuspended, not BackupRecent", func(t *testing.T) {
		e.t = t
		// Objects marshalled from velero's own Go types (test/fixtures);
		// velero's CRDs have no status subresource: velero writes whole objects.
		now := time.Now().UTC()
		e.createWholeObj(velero.Schedules.GVR, fixture(t, "velero.yaml", "Schedule", "nightly", now))
		b := fixture(t, "velero.yaml", "Backup", "", now)
		e.createWholeObj(velero.Backups.GVR, b)
		doneS, _, _ := unstructured.NestedString(b.Object, "status", "completionTimestamp")
		done, err := time.Parse(time.RFC3339, doneS)
		require.NoError(t, err)
		require.InDelta(t, (180 * 24 * time.Hour).Seconds(), now.Sub(done).Seconds(), 5, "the fixture's backup completed 180 days ago")
		// The Schedule may be judged before its Backup is: wait for the
		// judgement that has seen the Backup.
		h := e.health(platformNS, "backups", func(h *healthv1alpha1.Health) bool {
			c := cond(h, "Backup", "nightly")
			return c != nil && c.LastSuccessfulAt != nil
		})
		c := cond(h, "Backup", "nightly")
		assert.Equal(t, adapterkit.ReasonScheduleSuspended, c.Reason)
		assert.Contains(t, c.Message, "Schedule cozy-system/nightly is paused")
		assert.Equal(t, healthv1alpha1.StatusDegraded, h.Status.Overall)
		require.NotNil(t, c.MaxAge)
		assert.Equal(t, 36*time.Hour, c.MaxAge.Duration, "1.5 x the schedule's 24 h interval")
		require.NotNil(t, c.LastSuccessfulAt)
		assert.True(t, c.LastSuccessfulAt.Time.Equal(done))
	})

	// Kamaji's CRDs as Cozystack ships them (26.3.6-edge): DataStore
	// status.ready means "configuration valid". v1.0.0's DataStore, which
	// has no such field, is TestKamajiDataStoreWithoutReady.
	require.NoError(t, e.cp.InstallAdapterCRDs(ctx, "kamaji.clastix.io_datastores", "kamaji.clastix.io_tenantcontrolplanes"))
	t.Run("Kamaji DataStore ready then not ready: configuration validity, not reachability", func(t *testing.T) {
		e.t = t
		// The objects are marshalled from Kamaji's Go types (test/fixtures),
		// v1.0.0's: the module proxy serves no 26.x-edge version. The
		// DataStore's status.ready and its validation condition exist only
		// since 26.3.2-edge, so they are set here by hand, as that
		// Kamaji's DataStore controller writes them.
		now := time.Now().UTC()
		store := fixture(t, "kamaji.yaml", "DataStore", "tenant-bar", now)
		require.NoError(t, unstructured.SetNestedField(store.Object, true, "status", "ready"))
		require.NoError(t, unstructured.SetNestedField(store.Object, int64(1), "status", "observedGeneration"))
		require.NoError(t, unstructured.SetNestedSlice(store.Object, []any{map[string]any{
			"type": "kamaji.clastix.io/DataStoreValidation", "status": "True", "reason": "DataStoreValidated",
			"message": "", "lastTransitionTime": now.Add(-time.Hour).Format(time.RFC3339),
		}}, "status", "conditions"))
		e.createObj(kamaji.DataStores.GVR, store)
		e.createObj(kamaji.TenantControlPlanes.GVR, fixture(t, "kamaji.yaml", "TenantControlPlane", "kubernetes-bar", now))
		h := e.health("tenant-bar", "control-plane", func(h *healthv1alpha1.Health) bool {
			c := cond(h, kamaji.TypeDataStore, "tenant-bar")
			// The control plane's status arrives after its creation.
			return c != nil && c.Reason == kamaji.ReasonDataStoreReady && h.Status.Overall == healthv1alpha1.StatusHealthy
		})
		ds := cond(h, kamaji.TypeDataStore, "tenant-bar")
		assert.Equal(t, healthv1alpha1.ConditionTrue, ds.Status)
		assert.Equal(t, "DataStore.kamaji.clastix.io", ds.ResourceRef.Kind)
		assert.Contains(t, ds.Message, "configuration valid")
		assert.Contains(t, ds.Message, "not a reachability check")
		assert.Equal(t, healthv1alpha1.StatusHealthy, h.Status.Overall)
		tcp := cond(h, kamaji.TypeControlPlane, "kubernetes-bar")
		require.NotNil(t, tcp)
		assert.Equal(t, "tenant-bar", tcp.ResourceRef.Namespace)

		// Its certificates go missing: the configuration is not valid,
		// Degraded; the control plane's own status says it is down.
		e.setStatus(kamaji.DataStores.GVR, "", "tenant-bar", `ready: false
observedGeneration: 1
usedBy: [tenant-bar/kubernetes-bar]
conditions:
- type: kamaji.clastix.io/DataStoreValidation
  status: "False"
  reason: DataStoreValidationFailed
  message: "secrets \"etcd-client-tls\" not found"
  lastTransitionTime: "2026-12-01T09:30:00Z"
`)
		h = e.health("tenant-bar", "control-plane", func(h *healthv1alpha1.Health) bool {
			c := cond(h, kamaji.TypeDataStore, "tenant-bar")
			return c != nil && c.Reason == kamaji.ReasonDataStoreNotReady
		})
		assert.Equal(t, healthv1alpha1.StatusDegraded, h.Status.Overall, "an invalid configuration is not proof of an outage")
		assert.Contains(t, cond(h, kamaji.TypeDataStore, "tenant-bar").Message, `secrets "etcd-client-tls" not found`)
		// The control plane's own status (Kamaji's Go type): NotReady, no
		// replica ready.
		down := fixture(t, "kamaji.yaml", "TenantControlPlane", "kubernetes-bar-notready", now)
		e.setStatusObj(kamaji.TenantControlPlanes.GVR, "tenant-bar", "kubernetes-bar", down.Object["status"].(map[string]any))
		h = e.health("tenant-bar", "control-plane", func(h *healthv1alpha1.Health) bool { return h.Status.Overall == healthv1alpha1.StatusDown })
		assert.Equal(t, "NotReady", cond(h, kamaji.TypeControlPlane, "kubernetes-bar").Reason)
		assert.Equal(t, kamaji.ReasonNoReplicasReady, cond(h, kamaji.TypeDeployment, "kubernetes-bar").Reason)
	})

	t.Run("a CRD removed at runtime withdraws its objects", func(t *testing.T) {
		e.t = t
		e.adapterState("helmrelease", 1, 1, 7)
		require.NoError(t, e.cp.DeleteCRD(ctx, "helmreleases.helm.toolkit.fluxcd.io"))
		e.gone(platformNS, "platform")
		e.gone("tenant-foo", "apps")
		e.adapterState("helmrelease", 0, 0, 0)
		// An API that went away is absence, not a failed watch.
		assert.Equal(t, 0.0, e.gauge("cozy_health_adapter_errors_total", map[string]string{"adapter": "helmrelease", "reason": metrics.AdapterErrorWatch}))
		e.adapterState("cnpg", 1, 1, 3)
		// The other adapters go on.
		e.health("tenant-foo", "backups", func(h *healthv1alpha1.Health) bool { return cond(h, "Backup", "postgres-db") != nil })
		// And it comes back when the CRD does.
		require.NoError(t, e.cp.InstallAdapterCRDs(ctx, "helm.toolkit.fluxcd.io_helmreleases"))
		e.create(hr, helmRelease(platformNS, "cilium"))
		e.health(platformNS, "platform", func(h *healthv1alpha1.Health) bool { return cond(h, helmrelease.TypeRelease, "cilium") != nil })
		e.adapterState("helmrelease", 1, 1, 1)
	})
	for _, a := range []string{"helmrelease", "cnpg", "kamaji"} {
		for _, r := range []string{metrics.AdapterErrorPanic, metrics.AdapterErrorTimeout, metrics.AdapterErrorNotSynced} {
			assert.Equal(t, 0.0, e.gauge("cozy_health_adapter_errors_total", map[string]string{"adapter": a, "reason": r}), "%s %s", a, r)
		}
	}
}

// adapterState waits until an adapter's cozy_health_adapter_applicable,
// _synced and _objects read the given values.
func (e *env) adapterState(name string, applicable, synced, objects float64) {
	e.t.Helper()
	l := map[string]string{"adapter": name}
	var got [3]float64
	if !assert.Eventually(e.t, func() bool {
		got = [3]float64{e.gauge("cozy_health_adapter_applicable", l), e.gauge("cozy_health_adapter_synced", l), e.gauge("cozy_health_adapter_objects", l)}
		return got == [3]float64{applicable, synced, objects}
	}, 30*time.Second, 50*time.Millisecond) {
		e.t.Fatalf("%s: applicable, synced, objects = %v, want %v", name, got, [3]float64{applicable, synced, objects})
	}
}

// TestAdapterSourceNotSynced gives the adapters a credential that may not
// list velero Backups: the velero adapter's informer never syncs, so its
// component reads Unknown (SourceNotSynced), never Healthy, while the other
// adapters publish.
func TestAdapterSourceNotSynced(t *testing.T) {
	ctx := context.Background()
	e := start(t, adapterkit.Config{SyncTimeout: 2 * time.Second}, func(e *env) *rest.Config {
		require.NoError(t, e.cp.InstallAdapterCRDs(ctx, "velero.io_schedules", "velero.io_backups", "helm.toolkit.fluxcd.io_helmreleases"))
		_, err := e.cp.Clientset().RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "adapters-without-velero-backups"},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"}, Verbs: []string{"get", "list", "watch"}},
				{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list", "watch"}},
				{APIGroups: []string{"velero.io"}, Resources: []string{"schedules"}, Verbs: []string{"get", "list", "watch"}},
				{APIGroups: []string{"helm.toolkit.fluxcd.io"}, Resources: []string{"helmreleases"}, Verbs: []string{"get", "list", "watch"}},
			},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		_, err = e.cp.Clientset().RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "adapters-without-velero-backups"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "adapters-without-velero-backups"},
			Subjects:   []rbacv1.Subject{{Kind: "User", Name: "limited-adapters"}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		e.create(helmrelease.Source.GVR, helmRelease(platformNS, "cilium"))
		e.setStatus(helmrelease.Source.GVR, platformNS, "cilium", releaseStatus("True", "InstallSucceeded", "Helm install succeeded"))
		rc, err := e.cp.UserConfig("limited-adapters")
		require.NoError(t, err)
		return rc
	})
	h := e.health(platformNS, "backups", func(h *healthv1alpha1.Health) bool { return cond(h, adapterkit.TypeSource, "") != nil })
	c := cond(h, adapterkit.TypeSource, "")
	assert.Equal(t, healthv1alpha1.ConditionUnknown, c.Status)
	assert.Equal(t, adapterkit.ReasonSourceNotSynced, c.Reason)
	assert.Equal(t, "backups.velero.io", c.ResourceRef.Name)
	assert.Equal(t, healthv1alpha1.StatusUnknown, h.Status.Overall)
	e.health(platformNS, "platform", func(h *healthv1alpha1.Health) bool { return h.Status.Overall == healthv1alpha1.StatusHealthy })
	// The metrics say the same: velero applicable but not synced, its
	// failed lists counted, SourceNotSynced counted once.
	e.adapterState("velero", 1, 0, 0)
	e.adapterState("helmrelease", 1, 1, 1)
	assert.Equal(t, 1.0, e.gauge("cozy_health_adapter_errors_total", map[string]string{"adapter": "velero", "reason": metrics.AdapterErrorNotSynced}))
	assert.Positive(t, e.gauge("cozy_health_adapter_errors_total", map[string]string{"adapter": "velero", "reason": metrics.AdapterErrorWatch}), "the forbidden list of velero Backups")
	assert.Equal(t, 0.0, e.gauge("cozy_health_adapter_errors_total", map[string]string{"adapter": "helmrelease", "reason": metrics.AdapterErrorWatch}))
}

// faulty is an adapter on HelmReleases whose judgement panics, or runs
// past the judge deadline (5 s: longer than the 2 s period, so a second
// judgement would start while it runs if nothing held it back).
type faulty struct {
	name string
	slow bool
	// running counts the judgements running now, most the most at once.
	running, most *atomic.Int32
}

func (f faulty) Name() string               { return f.name }
func (faulty) Component() string            { return adapterkit.ComponentPlatform }
func (faulty) Sources() []adapterkit.Source { return []adapterkit.Source{helmrelease.Source} }
func (f faulty) Judge(*adapterkit.Input) []adapterkit.Finding {
	if f.slow {
		n := f.running.Add(1)
		defer f.running.Add(-1)
		for {
			m := f.most.Load()
			if n <= m || f.most.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(5 * time.Second)
		return nil
	}
	panic("judge bug")
}

// TestAdapterJudgeFailures: a judgement that panics and one past its
// deadline make their component Unknown (JudgeFailed), never Healthy, and
// are counted by reason; their informers are synced all the same. A
// judgement past its deadline is not started again while it still runs:
// one per adapter at a time, the periodic judgements it holds up counted.
func TestAdapterJudgeFailures(t *testing.T) {
	ctx := context.Background()
	hangs := faulty{name: "hangs", slow: true, running: &atomic.Int32{}, most: &atomic.Int32{}}
	e := startWith(t, adapterkit.Config{JudgeTimeout: 300 * time.Millisecond}, func(e *env) *rest.Config {
		require.NoError(t, e.cp.InstallAdapterCRDs(ctx, "helm.toolkit.fluxcd.io_helmreleases"))
		return nil
	}, []adapterkit.Adapter{faulty{name: "panics"}, hangs})
	h := e.health(platformNS, "platform", func(h *healthv1alpha1.Health) bool { return cond(h, adapterkit.TypeSource, "") != nil })
	c := cond(h, adapterkit.TypeSource, "")
	assert.Equal(t, adapterkit.ReasonJudgeFailed, c.Reason)
	assert.Equal(t, healthv1alpha1.StatusUnknown, h.Status.Overall)
	require.Eventually(t, func() bool {
		return e.gauge("cozy_health_adapter_errors_total", map[string]string{"adapter": "panics", "reason": metrics.AdapterErrorPanic}) >= 1 &&
			e.gauge("cozy_health_adapter_errors_total", map[string]string{"adapter": "hangs", "reason": metrics.AdapterErrorTimeout}) >= 1
	}, 30*time.Second, 100*time.Millisecond, "judge failures counted by reason")
	assert.Equal(t, 0.0, e.gauge("cozy_health_adapter_errors_total", map[string]string{"adapter": "panics", "reason": metrics.AdapterErrorTimeout}))
	assert.Equal(t, 0.0, e.gauge("cozy_health_adapter_errors_total", map[string]string{"adapter": "hangs", "reason": metrics.AdapterErrorPanic}))
	e.adapterState("panics", 1, 1, 0)
	e.adapterState("hangs", 1, 1, 0)
	// Past two periods of the one 5 s judgement: held up, never doubled.
	require.Eventually(t, func() bool {
		return e.gauge("cozy_health_adapter_judges_skipped_total", map[string]string{"adapter": "hangs"}) >= 2
	}, 30*time.Second, 100*time.Millisecond, "periodic judgements held up by the running one are counted")
	assert.Equal(t, int32(1), hangs.most.Load(), "judgements of one adapter running at once")
	assert.Equal(t, 0.0, e.gauge("cozy_health_adapter_judges_skipped_total", map[string]string{"adapter": "panics"}))
}

// cutDialer dials the apiserver for the adapters until cut: then it closes
// every connection it made and refuses new ones (connection refused, as a
// stopped apiserver does), until restored. The writer keeps its own
// connection: the Health objects are written throughout.
type cutDialer struct {
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

func (d *cutDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cut {
		return nil, &net.OpError{Op: "dial", Net: network, Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	}
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err == nil {
		d.conns = append(d.conns, c)
	}
	return c, err
}

func (d *cutDialer) setCut(cut bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cut = cut
	if cut {
		for _, c := range d.conns {
			_ = c.Close()
		}
		d.conns = nil
	}
}

// TestAdapterWatchFailing breaks the adapters' list and watch while the
// Health objects are still written, then fails a release: its object must
// not stay Healthy and fresh on the old cache. Within the grace its
// observedAt stays at the last confirmation; past it the object reads
// Unknown (WatchFailing, naming the resource and the error). Restored, the
// failed release is seen.
func TestAdapterWatchFailing(t *testing.T) {
	ctx := context.Background()
	dialer := &cutDialer{}
	hr := helmrelease.Source.GVR
	e := start(t, adapterkit.Config{WatchGrace: 3 * time.Second}, func(e *env) *rest.Config {
		require.NoError(t, e.cp.InstallAdapterCRDs(ctx, "helm.toolkit.fluxcd.io_helmreleases"))
		e.create(hr, helmRelease(platformNS, "cilium"))
		e.setStatus(hr, platformNS, "cilium", releaseStatus("True", "InstallSucceeded", "Helm install succeeded"))
		rc := rest.CopyConfig(e.cp.Config)
		rc.Dial = dialer.DialContext
		return rc
	})
	e.health(platformNS, "platform", func(h *healthv1alpha1.Health) bool { return h.Status.Overall == healthv1alpha1.StatusHealthy })

	dialer.setCut(true)
	cutAt := time.Now()
	e.setStatus(hr, platformNS, "cilium", releaseStatus("False", "UpgradeFailed", "Helm upgrade failed: context deadline exceeded"))
	// Until the object reads WatchFailing, whatever is written of the old
	// cache claims no confirmation after the cut.
	var h *healthv1alpha1.Health
	require.Eventually(t, func() bool {
		got, err := e.hc.HealthV1alpha1().Healths(platformNS).Get(ctx, "platform", metav1.GetOptions{})
		require.NoError(t, err)
		h = got
		if c := cond(got, adapterkit.TypeSource, ""); c != nil && c.Reason == adapterkit.ReasonWatchFailing {
			return true
		}
		if got.Status.Overall == healthv1alpha1.StatusHealthy {
			require.NotNil(t, got.Status.ObservedAt)
			require.False(t, got.Status.ObservedAt.After(cutAt.Add(time.Second)),
				"Healthy from the old cache with observedAt %s, after the cut at %s", got.Status.ObservedAt, cutAt)
		}
		return false
	}, 30*time.Second, 50*time.Millisecond, "never WatchFailing; last: %s", dump(h))
	t.Logf("WatchFailing written %s after the cut (grace 3s)", time.Since(cutAt).Round(100*time.Millisecond))
	assert.Equal(t, healthv1alpha1.StatusUnknown, h.Status.Overall)
	c := cond(h, adapterkit.TypeSource, "")
	assert.Equal(t, healthv1alpha1.ConditionUnknown, c.Status)
	assert.Equal(t, "helmreleases.helm.toolkit.fluxcd.io", c.ResourceRef.Name)
	assert.Contains(t, c.Message, "connection refused")
	assert.Nil(t, cond(h, helmrelease.TypeReleases, ""), "no judgement of the unconfirmed cache")
	assert.Equal(t, 1.0, e.gauge("cozy_health_adapter_errors_total", map[string]string{"adapter": "helmrelease", "reason": metrics.AdapterErrorWatchFailing}))

	dialer.setCut(false)
	h = e.health(platformNS, "platform", func(h *healthv1alpha1.Health) bool {
		c := cond(h, helmrelease.TypeRelease, "cilium")
		return c != nil && c.Reason == "UpgradeFailed"
	})
	assert.Equal(t, healthv1alpha1.StatusDegraded, h.Status.Overall)
	assert.Nil(t, cond(h, adapterkit.TypeSource, ""))
	assert.True(t, h.Status.ObservedAt.After(cutAt), "confirmed again after the restore")
}

// TestKamajiDataStoreWithoutReady installs Kamaji v1.0.0's DataStore CRD,
// which has no status.ready: a ready written by an older test fixture (or
// a newer Kamaji against the old CRD) is pruned by the apiserver, and the
// adapter reads Unknown (FieldAbsent), never Down, while the control
// plane's own status says it serves.
func TestKamajiDataStoreWithoutReady(t *testing.T) {
	ctx := context.Background()
	e := start(t, adapterkit.Config{}, func(e *env) *rest.Config {
		require.NoError(t, e.cp.InstallAdapterCRDs(ctx, "kamaji.clastix.io_datastores-v1.0.0", "kamaji.clastix.io_tenantcontrolplanes"))
		return nil
	})
	// Kamaji v1.0.0's own objects (test/fixtures). Its DataStoreStatus
	// has no ready; the ready set here is what a newer Kamaji (26.3.2-edge
	// and later) writes against this old CRD.
	now := time.Now().UTC()
	store := fixture(t, "kamaji.yaml", "DataStore", "tenant-bar", now)
	require.NoError(t, unstructured.SetNestedField(store.Object, true, "status", "ready"))
	e.createObj(kamaji.DataStores.GVR, store)
	// v1.0.0's schema has no status.ready: the apiserver pruned it.
	got, err := e.dyn.Resource(kamaji.DataStores.GVR).Get(ctx, "tenant-bar", metav1.GetOptions{})
	require.NoError(t, err)
	_, has, _ := unstructured.NestedFieldNoCopy(got.Object, "status", "ready")
	require.False(t, has, "status.ready survived v1.0.0's schema: %v", got.Object["status"])
	e.createObj(kamaji.TenantControlPlanes.GVR, fixture(t, "kamaji.yaml", "TenantControlPlane", "kubernetes-bar", now))
	h := e.health("tenant-bar", "control-plane", func(h *healthv1alpha1.Health) bool {
		c := cond(h, kamaji.TypeControlPlane, "kubernetes-bar")
		return cond(h, kamaji.TypeDataStore, "tenant-bar") != nil && c != nil && c.Status == healthv1alpha1.ConditionTrue
	})
	ds := cond(h, kamaji.TypeDataStore, "tenant-bar")
	assert.Equal(t, kamaji.ReasonFieldAbsent, ds.Reason)
	assert.Equal(t, healthv1alpha1.ConditionUnknown, ds.Status)
	assert.Equal(t, healthv1alpha1.StatusUnknown, h.Status.Overall, "a field the CRD lacks is no outage")
	assert.Equal(t, healthv1alpha1.ConditionTrue, cond(h, kamaji.TypeControlPlane, "kubernetes-bar").Status)
}

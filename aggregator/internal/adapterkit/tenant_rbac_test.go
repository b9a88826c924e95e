package adapterkit_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/cozystack/cozy-health/aggregator/internal/adapterkit"
	"github.com/cozystack/cozy-health/aggregator/internal/adapters"
	"github.com/cozystack/cozy-health/aggregator/internal/adapters/cnpg"
	"github.com/cozystack/cozy-health/aggregator/internal/adapters/helmrelease"
	"github.com/cozystack/cozy-health/aggregator/internal/adapters/kamaji"
	"github.com/cozystack/cozy-health/aggregator/internal/metrics"
	"github.com/cozystack/cozy-health/aggregator/internal/status"
	"github.com/cozystack/cozy-health/aggregator/internal/writer"
	"github.com/cozystack/cozy-health/deploy"
	healthv1alpha1 "github.com/cozystack/cozy-health/pkg/apis/health/v1alpha1"
	ac "github.com/cozystack/cozy-health/pkg/applyconfiguration/health/v1alpha1"
	"github.com/cozystack/cozy-health/pkg/client/clientset/versioned"
	"github.com/cozystack/cozy-health/test/harness"
)

// TestTenantScopeWithShippedRBAC runs the adapters and the writer as the
// aggregator's ServiceAccount under the shipped RBAC (deploy/), so what
// they need is exactly what is granted, and proves the tenant scope on the
// real authorizer: a tenant-foo user bound to the built-in view, or to
// Cozystack's tenant view role (which aggregates
// rbac.cozystack.io/aggregate-to-tenant-view), in tenant-foo reads
// tenant-foo's backups and control-plane objects, cannot read tenant-bar's
// or cozy-system's, and cannot write any.
func TestTenantScopeWithShippedRBAC(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var aggConfig *rest.Config
	e := &env{t: t}
	e.cp = harness.Start(t)
	cp := e.cp
	require.NoError(t, cp.InstallCRDs(ctx))
	require.NoError(t, cp.InstallAdapterCRDs(ctx))
	var err error
	e.dyn, err = dynamic.NewForConfig(cp.Config)
	require.NoError(t, err)
	e.hc, err = versioned.NewForConfig(cp.Config)
	require.NoError(t, err)
	require.NoError(t, cp.EnsureNamespace(ctx, platformNS))
	for _, ns := range []string{"tenant-foo", "tenant-bar"} {
		_, err := cp.Kubectl(ctx, "create", "namespace", ns)
		require.NoError(t, err)
		_, err = cp.Kubectl(ctx, "label", "namespace", ns, "tenant.cozystack.io/tenant-root=", "tenant.cozystack.io/"+ns+"=")
		require.NoError(t, err)
	}
	// The shipped plain manifests, rendered from the chart.
	require.NoError(t, cp.InstallTalosServiceAccountCRD(ctx))
	// Where Cozystack runs LINSTOR: the manifests' Role on its client
	// certificate Secret lives there.
	require.NoError(t, cp.EnsureNamespace(ctx, "cozy-linstor"))
	f := filepath.Join(harness.RepoRoot(), deploy.ManifestsFile)
	out, err := cp.Kubectl(ctx, "apply", "--server-side", "-f", f)
	require.NoError(t, err, "apply %s: %s", f, out)
	// Cozystack's tenant view role, as cozystack-basics ships it: an
	// aggregated ClusterRole.
	_, err = cp.Clientset().RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "cozy:tenant:view"},
		AggregationRule: &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{
			{MatchLabels: map[string]string{"rbac.cozystack.io/aggregate-to-tenant-view": "true"}}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, cp.AggregateClusterRoles(ctx))
	for user, role := range map[string]string{"alice": "view", "bob": "cozy:tenant:view"} {
		_, err := cp.Clientset().RbacV1().RoleBindings("tenant-foo").Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: user},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: user}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}

	// Facts in both tenants and the platform.
	// The CNPG Cluster and Kamaji TenantControlPlane are marshalled from
	// their projects' Go types (test/fixtures).
	now := time.Now().UTC()
	for _, ns := range []string{"tenant-foo", "tenant-bar"} {
		c := fixture(t, "cnpg.yaml", "Cluster", "postgres-db", now)
		c.SetNamespace(ns)
		e.createObj(cnpg.Clusters.GVR, c)
		tcp := fixture(t, "kamaji.yaml", "TenantControlPlane", "kubernetes-bar", now)
		tcp.SetNamespace(ns)
		e.createObj(kamaji.TenantControlPlanes.GVR, tcp)
	}
	e.create(helmReleaseGVR(), helmRelease(platformNS, "cilium"))
	e.setStatus(helmReleaseGVR(), platformNS, "cilium", releaseStatus("True", "InstallSucceeded", "Helm install succeeded"))

	aggConfig = serviceAccountConfig(t, cp, "cozy-health", "cozy-health-aggregator")
	aggHealth, err := versioned.NewForConfig(aggConfig)
	require.NoError(t, err)
	aggDyn, err := dynamic.NewForConfig(aggConfig)
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	log := zaptest.NewLogger(t)
	w, err := writer.New(writer.Config{Namespace: platformNS, FreshFor: time.Minute, RefreshPeriod: 20 * time.Second, WritesPerSecond: 50, WriteBurst: 50}, aggHealth, m, log, nil)
	require.NoError(t, err)
	mgr := adapterkit.NewManager(adapterkit.Config{Namespace: platformNS, Debounce: 100 * time.Millisecond, Period: time.Second, SyncTimeout: 5 * time.Second, Metrics: m, Ready: w.AdaptersReady}, aggDyn, adapters.All(), status.Publishers{m, w}, log, nil)
	done := make(chan struct{}, 2)
	go func() { _ = mgr.Run(ctx); done <- struct{}{} }()
	go func() { w.Run(ctx); done <- struct{}{} }()
	defer func() { cancel(); <-done; <-done }()

	for _, k := range []writer.Key{{Namespace: "tenant-foo", Component: "backups"}, {Namespace: "tenant-foo", Component: "control-plane"},
		{Namespace: "tenant-bar", Component: "backups"}, {Namespace: "tenant-bar", Component: "control-plane"}, {Namespace: platformNS, Component: "platform"}} {
		h := e.health(k.Namespace, k.Component, func(h *healthv1alpha1.Health) bool { return h.Status.Overall != "" })
		assert.Nil(t, cond(h, adapterkit.TypeSource, ""), "%s: every source synced under the shipped RBAC: %s", k, dump(h))
	}
	// The adapters' own metrics say the same, and no list was refused.
	re := &env{t: t, reg: reg}
	for _, a := range adapters.All() {
		re.adapterState(a.Name(), 1, 1, re.gauge("cozy_health_adapter_objects", map[string]string{"adapter": a.Name()}))
		assert.Equal(t, 0.0, re.gauge("cozy_health_adapter_errors_total", map[string]string{"adapter": a.Name(), "reason": metrics.AdapterErrorWatch}), a.Name())
	}

	for _, user := range []string{"alice", "bob"} {
		rc, err := cp.UserConfig(user)
		require.NoError(t, err)
		hc, err := versioned.NewForConfig(rc)
		require.NoError(t, err)
		var got *healthv1alpha1.Health
		var getErr error
		assert.Eventually(t, func() bool { // bindings reach the authorizer asynchronously
			got, getErr = hc.HealthV1alpha1().Healths("tenant-foo").Get(ctx, "backups", metav1.GetOptions{})
			return getErr == nil
		}, 10*time.Second, 100*time.Millisecond)
		require.NoError(t, getErr, "%s reads tenant-foo/backups", user)
		assert.Equal(t, "backups", got.Spec.Component)
		_, err = hc.HealthV1alpha1().Healths("tenant-foo").Get(ctx, "control-plane", metav1.GetOptions{})
		assert.NoError(t, err, "%s reads tenant-foo/control-plane", user)
		list, err := hc.HealthV1alpha1().Healths("tenant-foo").List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		assert.Len(t, list.Items, 2, "%s lists tenant-foo", user)

		for _, k := range []writer.Key{{Namespace: "tenant-bar", Component: "backups"}, {Namespace: "tenant-bar", Component: "control-plane"}, {Namespace: platformNS, Component: "platform"}} {
			_, err := hc.HealthV1alpha1().Healths(k.Namespace).Get(ctx, k.Component, metav1.GetOptions{})
			assert.True(t, apierrors.IsForbidden(err), "%s reads %s: %v", user, k, err)
		}
		_, err = hc.HealthV1alpha1().Healths(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		assert.True(t, apierrors.IsForbidden(err), "%s lists every namespace: %v", user, err)

		apply := metav1.ApplyOptions{FieldManager: user, Force: true}
		_, err = hc.HealthV1alpha1().Healths("tenant-foo").ApplyStatus(ctx, ac.Health("backups", "tenant-foo").WithStatus(ac.HealthStatus().WithOverall(healthv1alpha1.StatusHealthy)), apply)
		assert.True(t, apierrors.IsForbidden(err), "%s writes status: %v", user, err)
		_, err = hc.HealthV1alpha1().Healths("tenant-foo").Patch(ctx, "backups", types.MergePatchType, []byte(`{"spec":{"sla":{"maxAge":"1000h"}}}`), metav1.PatchOptions{})
		assert.True(t, apierrors.IsForbidden(err), "%s patches spec: %v", user, err)
		_, err = hc.HealthV1alpha1().Healths("tenant-foo").Apply(ctx, ac.Health("fake", "tenant-foo").WithSpec(ac.HealthSpec().WithComponent("fake")), apply)
		assert.True(t, apierrors.IsForbidden(err), "%s creates: %v", user, err)
		err = hc.HealthV1alpha1().Healths("tenant-foo").Delete(ctx, "control-plane", metav1.DeleteOptions{})
		assert.True(t, apierrors.IsForbidden(err), "%s deletes: %v", user, err)
	}
}

func helmReleaseGVR() schema.GroupVersionResource { return helmrelease.Source.GVR }

// serviceAccountConfig is a client config with a real pod-bound token of
// ns/sa, as the aggregator's pod uses.
func serviceAccountConfig(t *testing.T, cp *harness.ControlPlane, ns, sa string) *rest.Config {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, cp.CreateServiceAccount(ctx, ns, sa))
	_, err := cp.CreateNodeAndPod(ctx, "node-1", ns, sa+"-0", sa)
	require.NoError(t, err)
	tok, err := cp.PodBoundToken(ctx, ns, sa, sa+"-0", []string{"https://kubernetes.default.svc.cluster.local"}, time.Hour)
	require.NoError(t, err)
	cfg := rest.AnonymousClientConfig(cp.Config)
	cfg.BearerToken = tok
	return cfg
}

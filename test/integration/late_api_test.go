package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/cozy-health/deploy/render"
	"github.com/cozystack/cozy-health/test/harness"
)

var (
	fluxHelmRepositories = schema.GroupVersionResource{Group: "source.toolkit.fluxcd.io", Version: "v1", Resource: "helmrepositories"}
	fluxHelmReleases     = schema.GroupVersionResource{Group: "helm.toolkit.fluxcd.io", Version: "v2", Resource: "helmreleases"}
)

// gatedRetryInterval stands for the Cozystack operator's
// --helmrelease-retry-interval (30s by default in v1.6.2), shortened so the
// test is quick.
const gatedRetryInterval = 5 * time.Second

// cozystackHelmRelease is the HelmRelease Cozystack v1.6.2's package operator
// writes for a component (internal/operator/package_reconciler.go
// buildHelmReleaseSpec): install and upgrade strategy RetryOnFailure with
// its retry interval, no remediation. The chart comes from a HelmRepository
// here instead of the operator's ExternalArtifact.
func cozystackHelmRelease(name, chart string) string {
	return fmt.Sprintf(`apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata:
  name: %[1]s
  namespace: cozy-health
spec:
  interval: 5m
  maxHistory: 5
  releaseName: %[1]s
  chart:
    spec:
      chart: %[2]s
      version: 0.0.0
      interval: 1m
      sourceRef:
        kind: HelmRepository
        name: cozystack-packages
  install:
    strategy:
      name: RetryOnFailure
      retryInterval: %[3]s
  upgrade:
    strategy:
      name: RetryOnFailure
      retryInterval: %[3]s
`, name, chart, gatedRetryInterval)
}

// TestGatedComponentsAppearWhenTheirAPIArrives: the Cozystack package's
// components cozy-health-talos and cozy-health-linstor, reconciled by the
// real source-controller and helm-controller as the operator configures
// their HelmReleases, fail while the cluster lacks what they need and
// create their objects on their own once it arrives (the talos.dev CRD the
// Talos patch brings; LINSTOR's cozy-linstor namespace): nothing forces a
// reconcile.
func TestGatedComponentsAppearWhenTheirAPIArrives(t *testing.T) {
	ctx := context.Background()
	cp := harness.StartWith(t, harness.Options{})
	cp.StartFlux(t, harness.FluxOptions{})
	dyn, err := dynamic.NewForConfig(cp.Config)
	require.NoError(t, err)
	createNamespace(t, cp.Clientset(), "cozy-health", nil)

	ps, err := render.LoadPackageSource()
	require.NoError(t, err)
	talos, err := render.LoadCozystackComponent(ps, "default", "cozy-health-talos")
	require.NoError(t, err)
	linstor, err := render.LoadCozystackComponent(ps, "default", "cozy-health-linstor")
	require.NoError(t, err)
	url := harness.ServeCharts(t, talos, linstor)

	create := func(gvr schema.GroupVersionResource, doc string) {
		t.Helper()
		u := &unstructured.Unstructured{}
		require.NoError(t, yaml.Unmarshal([]byte(doc), &u.Object))
		_, err := dyn.Resource(gvr).Namespace(u.GetNamespace()).Create(ctx, u, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	create(fluxHelmRepositories, fmt.Sprintf("apiVersion: source.toolkit.fluxcd.io/v1\nkind: HelmRepository\nmetadata:\n  name: cozystack-packages\n  namespace: cozy-health\nspec:\n  interval: 1m\n  url: %s\n", url))
	create(fluxHelmReleases, cozystackHelmRelease("cozy-health-talos", talos.Name()))
	create(fluxHelmReleases, cozystackHelmRelease("cozy-health-linstor", linstor.Name()))

	// ready reads a HelmRelease's Ready condition.
	ready := func(name string) (string, string) {
		hr, err := dyn.Resource(fluxHelmReleases).Namespace("cozy-health").Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		conds, _, _ := unstructured.NestedSlice(hr.Object, "status", "conditions")
		for _, c := range conds {
			m := c.(map[string]any)
			if m["type"] == "Ready" {
				return fmt.Sprint(m["status"]), fmt.Sprint(m["message"])
			}
		}
		return "", ""
	}
	// Both fail for the reason the cluster gives, and are retried.
	for name, want := range map[string]string{"cozy-health-talos": "talos.dev/v1alpha1", "cozy-health-linstor": `namespaces "cozy-linstor" not found`} {
		require.Eventually(t, func() bool {
			st, msg := ready(name)
			t.Logf("%s: Ready=%s %s", name, st, msg)
			return st == "False" && strings.Contains(msg, want)
		}, 2*time.Minute, time.Second, "%s fails naming %s", name, want)
	}
	time.Sleep(2 * gatedRetryInterval) // retried at least once more, still failing
	st, msg := ready("cozy-health-talos")
	assert.NotEqual(t, "True", st, msg)

	talosSA := schema.GroupVersionResource{Group: "talos.dev", Version: "v1alpha1", Resource: "serviceaccounts"}
	require.NoError(t, cp.InstallTalosServiceAccountCRD(ctx))
	arrived := time.Now()
	require.Eventually(t, func() bool {
		_, err := dyn.Resource(talosSA).Namespace("cozy-health").Get(ctx, "cozy-health-agent-talos-secrets", metav1.GetOptions{})
		return err == nil
	}, 2*time.Minute, 200*time.Millisecond, "the Talos ServiceAccount appears once talos.dev is served")
	t.Logf("Talos ServiceAccount %v after the API arrived (retry interval %v)", time.Since(arrived).Round(100*time.Millisecond), gatedRetryInterval)
	assert.Less(t, time.Since(arrived), 6*gatedRetryInterval)

	createNamespace(t, cp.Clientset(), "cozy-linstor", nil)
	arrived = time.Now()
	require.Eventually(t, func() bool {
		_, err1 := cp.Clientset().RbacV1().Roles("cozy-linstor").Get(ctx, "cozy-health-aggregator-linstor-client", metav1.GetOptions{})
		_, err2 := cp.Clientset().RbacV1().RoleBindings("cozy-linstor").Get(ctx, "cozy-health-aggregator-linstor-client", metav1.GetOptions{})
		return err1 == nil && err2 == nil
	}, 2*time.Minute, 200*time.Millisecond, "the LINSTOR Role appears once cozy-linstor exists")
	t.Logf("LINSTOR Role %v after cozy-linstor appeared", time.Since(arrived).Round(100*time.Millisecond))
	assert.Less(t, time.Since(arrived), 6*gatedRetryInterval)

	for _, name := range []string{"cozy-health-talos", "cozy-health-linstor"} {
		require.Eventually(t, func() bool { st, _ := ready(name); return st == "True" }, time.Minute, time.Second, "%s Ready", name)
		hr, err := dyn.Resource(fluxHelmReleases).Namespace("cozy-health").Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		assert.NotContains(t, hr.GetAnnotations(), "reconcile.fluxcd.io/requestedAt", "no reconcile was requested")
	}
}

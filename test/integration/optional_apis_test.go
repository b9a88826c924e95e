package integration

import (
	"context"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/action"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/cozystack/cozy-health/deploy/render"
	"github.com/cozystack/cozy-health/test/harness"
	"github.com/cozystack/cozy-health/test/lab"
)

// servedAPIs is .Capabilities.APIVersions as helm install and Flux's
// helm-controller build it: Helm's own GetVersionSet over the apiserver's
// discovery.
func servedAPIs(t *testing.T, cfg *rest.Config) []string {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	require.NoError(t, err)
	vs, err := action.GetVersionSet(dc)
	require.NoError(t, err)
	return vs
}

// optionalKinds are the kinds of APIs a cluster may not serve.
var optionalKinds = map[string]string{
	"talos.dev/v1alpha1/ServiceAccount":                    "talos",
	"cert-manager.io/v1/Issuer":                            "cert-manager",
	"cert-manager.io/v1/Certificate":                       "cert-manager",
	"monitoring.coreos.com/v1/ServiceMonitor":              "prometheus-operator",
	"monitoring.coreos.com/v1/PrometheusRule":              "prometheus-operator",
	"operator.victoriametrics.com/v1beta1/VMServiceScrape": "victoriametrics",
	"operator.victoriametrics.com/v1beta1/VMRule":          "victoriametrics",
	"grafana.integreatly.org/v1beta1/GrafanaDashboard":     "grafana-operator",
	"cilium.io/v2/CiliumNetworkPolicy":                     "cilium",
}

func optionalIn(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		k := o.GetAPIVersion() + "/" + o.GetKind()
		if _, ok := optionalKinds[k]; ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// TestChartOptionalAPIs installs the chart, as helm install would, on a
// cluster serving none of the optional APIs (Talos before its patch, no
// cert-manager, no monitoring operator, no grafana-operator, no Cilium): it renders
// none of their kinds and every object is accepted. Then each API appears
// (its project's own CRD installed), the chart is rendered again with what
// the cluster now serves, as helm upgrade or Flux's next upgrade would, and
// that API's objects are rendered and accepted by its schema.
func TestChartOptionalAPIs(t *testing.T) {
	ctx := context.Background()
	cp := harness.StartWith(t, harness.Options{TalosPodSecurity: true})
	require.NoError(t, cp.EnsureNamespace(ctx, "cozy-system"))
	createNamespace(t, cp.Clientset(), "cozy-health", map[string]string{"pod-security.kubernetes.io/enforce": "privileged"})
	a := newApplier(t, cp.Config)

	install := func(t *testing.T, want []string) []*unstructured.Unstructured {
		t.Helper()
		apis := servedAPIs(t, cp.Config)
		r, err := render.Render(render.Options{Namespace: "cozy-health", APIVersions: apis, Cluster: cp.Config, Values: map[string]any{"monitoring": map[string]any{"dashboard": map[string]any{"enabled": true}}}})
		require.NoError(t, err)
		objs, err := r.Objects()
		require.NoError(t, err)
		assert.Equal(t, want, optionalIn(objs))
		for _, o := range objs {
			assert.NoError(t, a.apply(ctx, o, false), "%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
		}
		return objs
	}

	t.Run("no optional API", func(t *testing.T) {
		objs := install(t, nil)
		kinds := map[string]bool{}
		for _, o := range objs {
			kinds[o.GetKind()] = true
		}
		assert.True(t, kinds["NetworkPolicy"], "the plain NetworkPolicy without Cilium")
		assert.True(t, kinds["DaemonSet"] && kinds["Deployment"])
	})
	t.Run("Talos after the patch", func(t *testing.T) {
		require.NoError(t, cp.InstallTalosServiceAccountCRD(ctx))
		install(t, []string{"talos.dev/v1alpha1/ServiceAccount"})
	})
	t.Run("cert-manager", func(t *testing.T) {
		require.NoError(t, cp.InstallCertManagerCRDs(ctx))
		install(t, []string{"cert-manager.io/v1/Certificate", "cert-manager.io/v1/Certificate", "cert-manager.io/v1/Issuer", "cert-manager.io/v1/Issuer", "talos.dev/v1alpha1/ServiceAccount"})
	})
	t.Run("prometheus-operator", func(t *testing.T) {
		require.NoError(t, cp.InstallCRDFiles(ctx, "monitoring/monitoring.coreos.com_servicemonitors.yaml", "monitoring/monitoring.coreos.com_prometheusrules.yaml"))
		install(t, []string{"cert-manager.io/v1/Certificate", "cert-manager.io/v1/Certificate", "cert-manager.io/v1/Issuer", "cert-manager.io/v1/Issuer",
			"monitoring.coreos.com/v1/PrometheusRule", "monitoring.coreos.com/v1/ServiceMonitor", "talos.dev/v1alpha1/ServiceAccount"})
	})
	t.Run("VictoriaMetrics and grafana-operator (Cozystack)", func(t *testing.T) {
		require.NoError(t, cp.InstallCRDFiles(ctx, "monitoring/operator.victoriametrics.com_vmservicescrapes.yaml", "monitoring/operator.victoriametrics.com_vmrules.yaml",
			"monitoring/grafana.integreatly.org_grafanadashboards.yaml"))
		install(t, []string{"cert-manager.io/v1/Certificate", "cert-manager.io/v1/Certificate", "cert-manager.io/v1/Issuer", "cert-manager.io/v1/Issuer",
			"grafana.integreatly.org/v1beta1/GrafanaDashboard", "operator.victoriametrics.com/v1beta1/VMRule", "operator.victoriametrics.com/v1beta1/VMServiceScrape",
			"talos.dev/v1alpha1/ServiceAccount"})
	})
	t.Run("Cilium", func(t *testing.T) {
		require.NoError(t, cp.InstallCRDFiles(ctx, "cilium/cilium.io_ciliumnetworkpolicies.yaml"))
		objs := install(t, []string{"cert-manager.io/v1/Certificate", "cert-manager.io/v1/Certificate", "cert-manager.io/v1/Issuer", "cert-manager.io/v1/Issuer",
			"cilium.io/v2/CiliumNetworkPolicy", "grafana.integreatly.org/v1beta1/GrafanaDashboard", "operator.victoriametrics.com/v1beta1/VMRule",
			"operator.victoriametrics.com/v1beta1/VMServiceScrape", "talos.dev/v1alpha1/ServiceAccount"})
		for _, o := range objs {
			assert.NotEqual(t, "NetworkPolicy", o.GetKind(), "Cilium does not match ipBlock for host and node identities: its own policy instead")
		}
	})
	// The schemas are real: a scrape object with a misspelt relabel field is
	// refused, so the acceptance above means something.
	t.Run("schemas enforced", func(t *testing.T) {
		r, err := render.Render(render.Options{Namespace: "cozy-health", APIVersions: servedAPIs(t, cp.Config)})
		require.NoError(t, err)
		sc, err := r.Object("VMServiceScrape", "cozy-health-aggregator")
		require.NoError(t, err)
		eps, _, _ := unstructured.NestedSlice(sc.Object, "spec", "endpoints")
		eps[0].(map[string]any)["relabelConfig"] = eps[0].(map[string]any)["relabelConfigs"]
		require.NoError(t, unstructured.SetNestedSlice(sc.Object, eps, "spec", "endpoints"))
		err = a.apply(ctx, sc, true)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "relabelConfig")
	})
}

// TestHelmUpgradeAddsTheTalosServiceAccount: `helm install` (the Helm SDK,
// its capabilities from the apiserver's discovery) succeeds on a cluster
// that does not serve talos.dev, without the ServiceAccount; once Talos
// serves it (the patch applied), `helm upgrade` with the same values
// creates it, as the README says.
func TestHelmUpgradeAddsTheTalosServiceAccount(t *testing.T) {
	ctx := context.Background()
	cp := harness.StartWith(t, harness.Options{TalosPodSecurity: true})
	require.NoError(t, cp.EnsureNamespace(ctx, "cozy-system"))
	createNamespace(t, cp.Clientset(), "cozy-health", map[string]string{"pod-security.kubernetes.io/enforce": "privileged"})
	h, err := lab.NewHelm(cp.Kubeconfig, "cozy-health", "cozy-health")
	require.NoError(t, err)
	dyn, err := dynamic.NewForConfig(cp.Config)
	require.NoError(t, err)
	talosSA := schema.GroupVersionResource{Group: "talos.dev", Version: "v1alpha1", Resource: "serviceaccounts"}

	rel, err := h.Install(ctx, nil)
	require.NoError(t, err, "installed before the Talos patch")
	assert.NotContains(t, rel.Manifest, "talos.dev/v1alpha1")
	assert.Contains(t, rel.Info.Notes, "does not serve talos.dev/v1alpha1 yet")

	require.NoError(t, cp.InstallTalosServiceAccountCRD(ctx))
	// A new `helm upgrade` (one Helm action configuration keeps the
	// capabilities it read first, as one helm process does).
	h, err = lab.NewHelm(cp.Kubeconfig, "cozy-health", "cozy-health")
	require.NoError(t, err)
	rel, err = h.Upgrade(ctx, nil)
	require.NoError(t, err)
	assert.Contains(t, rel.Manifest, "talos.dev/v1alpha1")
	sa, err := dyn.Resource(talosSA).Namespace("cozy-health").Get(ctx, "cozy-health-agent-talos-secrets", metav1.GetOptions{})
	require.NoError(t, err, "helm upgrade created the Talos ServiceAccount")
	roles, _, _ := unstructured.NestedStringSlice(sa.Object, "spec", "roles")
	assert.Equal(t, []string{"os:reader"}, roles)
}

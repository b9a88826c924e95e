package integration

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/cozy-health/deploy"
	"github.com/cozystack/cozy-health/deploy/render"
	"github.com/cozystack/cozy-health/test/harness"
)

var (
	packageSourceGVR = schema.GroupVersionResource{Group: "cozystack.io", Version: "v1alpha1", Resource: "packagesources"}
	packageGVR       = schema.GroupVersionResource{Group: "cozystack.io", Version: "v1alpha1", Resource: "packages"}
)

// emitPackages renders deploy/cozystack/snippets/bundles-system.yaml as
// Cozystack's platform chart renders its bundles/system.yaml: with the
// platform's own package templates (testdata/cozystack-platform, copied from
// Cozystack v1.6.2) and platform values.
func emitPackages(t *testing.T, values map[string]any) []*unstructured.Unstructured {
	t.Helper()
	helpers, err := os.ReadFile(filepath.Join("testdata", "cozystack-platform", "_helpers.tpl"))
	require.NoError(t, err)
	snippet, err := fs.ReadFile(deploy.Cozystack(), "snippets/bundles-system.yaml")
	require.NoError(t, err)
	c := &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: "v2", Name: "cozy-platform", Version: "0.0.0"},
		Templates: []*chart.File{
			{Name: "templates/_helpers.tpl", Data: helpers},
			{Name: "templates/bundles/system.yaml", Data: snippet},
		},
	}
	top, err := chartutil.ToRenderValues(c, values, chartutil.ReleaseOptions{Name: "cozystack-platform", Namespace: "cozy-system", IsInstall: true}, nil)
	require.NoError(t, err)
	out, err := engine.Render(c, top)
	require.NoError(t, err)
	var objs []*unstructured.Unstructured
	for _, doc := range releaseutil.SplitManifests(out["cozy-platform/templates/bundles/system.yaml"]) {
		u := &unstructured.Unstructured{}
		require.NoError(t, yaml.Unmarshal([]byte(doc), &u.Object))
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
	return objs
}

// platformValues are Cozystack's platform values the snippet reads
// (packages/core/platform/values.yaml defaults, a custom cluster domain).
func platformValues(enabled, disabled []any) map[string]any {
	return map[string]any{
		"bundles":    map[string]any{"enabledPackages": enabled, "disabledPackages": disabled},
		"networking": map[string]any{"clusterDomain": "cozy.example", "podCIDR": "10.244.0.0/16", "joinCIDR": "100.64.0.0/16"},
	}
}

// TestCozystackPackageOnItsCRDs: the PackageSource and the Package that
// bundles/system.yaml emits validate against Cozystack's own CRDs
// (test/crds/cozystack, v1.6.2) on a real apiserver; what the Package passes
// reaches the chart as the operator assembles it, and that release is
// accepted by the apiserver in the namespace the operator creates.
func TestCozystackPackageOnItsCRDs(t *testing.T) {
	ctx := context.Background()
	cp := harness.StartWith(t, harness.Options{TalosPodSecurity: true})
	require.NoError(t, cp.InstallCRDFiles(ctx, "cozystack/cozystack.io_packagesources.yaml", "cozystack/cozystack.io_packages.yaml"))
	dyn, err := dynamic.NewForConfig(cp.Config)
	require.NoError(t, err)
	apply := func(gvr schema.GroupVersionResource, o *unstructured.Unstructured, dryRun bool) error {
		opts := metav1.ApplyOptions{FieldManager: "cozystack", Force: true}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		_, err := dyn.Resource(gvr).Apply(ctx, o.GetName(), o, opts)
		return err
	}

	raw, err := fs.ReadFile(deploy.Cozystack(), render.PackageSourceFile)
	require.NoError(t, err)
	ps := &unstructured.Unstructured{}
	require.NoError(t, yaml.Unmarshal(raw, &ps.Object))
	require.NoError(t, apply(packageSourceGVR, ps, false), "the PackageSource on Cozystack's CRD")
	got, err := dyn.Resource(packageSourceGVR).Get(ctx, "cozystack.cozy-health", metav1.GetOptions{})
	require.NoError(t, err)
	comps, _, _ := unstructured.NestedSlice(got.Object, "spec", "variants")
	require.Len(t, comps, 1)
	stored := comps[0].(map[string]any)["components"].([]any)[0].(map[string]any)["install"].(map[string]any)
	assert.Equal(t, map[string]any{"namespace": "cozy-health", "releaseName": "cozy-health", "privileged": true, "upgradeCRDs": "CreateReplace"}, stored,
		"every install field survived the schema (none pruned)")

	// The CRD is strict: a misspelt field or a value outside an enum is refused.
	for want, mutate := range map[string]func(map[string]any){
		`Unsupported value: "Replace"`: func(i map[string]any) { i["upgradeCRDs"] = "Replace" },
		`field not declared in schema`: func(i map[string]any) { i["privilged"] = true },
	} {
		bad := ps.DeepCopy()
		vs, _, _ := unstructured.NestedSlice(bad.Object, "spec", "variants")
		mutate(vs[0].(map[string]any)["components"].([]any)[0].(map[string]any)["install"].(map[string]any))
		require.NoError(t, unstructured.SetNestedSlice(bad.Object, vs, "spec", "variants"))
		err := apply(packageSourceGVR, bad, true)
		if assert.Error(t, err, want) {
			assert.Contains(t, err.Error(), want)
		}
	}

	// Optional: emitted only when listed in bundles.enabledPackages, and not
	// when also disabled.
	assert.Empty(t, emitPackages(t, platformValues(nil, nil)))
	assert.Empty(t, emitPackages(t, platformValues([]any{"cozystack.cozy-health"}, []any{"cozystack.cozy-health"})))
	pkgs := emitPackages(t, platformValues([]any{"cozystack.cozy-health"}, nil))
	require.Len(t, pkgs, 1)
	pkg := pkgs[0]
	assert.Equal(t, "Package", pkg.GetKind())
	assert.Equal(t, "cozystack.cozy-health", pkg.GetName(), "the Package is named after its PackageSource")
	require.NoError(t, apply(packageGVR, pkg, false), "the Package on Cozystack's CRD")
	stPkg, err := dyn.Resource(packageGVR).Get(ctx, "cozystack.cozy-health", metav1.GetOptions{})
	require.NoError(t, err)
	values, ok, err := unstructured.NestedMap(stPkg.Object, "spec", "components", "cozy-health", "values")
	require.NoError(t, err)
	require.True(t, ok, "the component's values survived the schema")
	variant, _, _ := unstructured.NestedString(stPkg.Object, "spec", "variant")
	assert.Equal(t, "default", variant)

	// The HelmRelease the operator makes: the Package's values over the
	// wrapper's, Secret cozystack-values (_cluster) beside them.
	values["_cluster"] = map[string]any{"cluster-domain": "cozy.example", "root-host": "example.org"}
	src, err := render.LoadPackageSource()
	require.NoError(t, err)
	c, err := render.LoadCozystackComponent(src, "default", "cozy-health")
	require.NoError(t, err)
	// The operator creates the namespace, labelled for a privileged component.
	createNamespace(t, cp.Clientset(), "cozy-health", map[string]string{"cozystack.io/system": "true", "pod-security.kubernetes.io/enforce": "privileged"})
	require.NoError(t, cp.EnsureNamespace(ctx, "cozy-system"))
	require.NoError(t, cp.InstallCertManagerCRDs(ctx))
	r, err := render.RenderChart(c, render.Options{Namespace: "cozy-health", Values: values, APIVersions: servedAPIs(t, cp.Config), Cluster: cp.Config})
	require.NoError(t, err)
	cert, err := r.Object("Certificate", "cozy-health-aggregator")
	require.NoError(t, err)
	dns, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	assert.Contains(t, dns, "cozy-health-aggregator-ingest.cozy-health.svc.cozy.example", "the platform's cluster domain, through the Package")
	np, err := r.Object("NetworkPolicy", "cozy-health-aggregator")
	require.NoError(t, err)
	from, _, _ := unstructured.NestedSlice(np.Object, "spec", "ingress")
	assert.Equal(t, []any{map[string]any{"ipBlock": map[string]any{"cidr": "100.64.0.0/16"}}}, from[1].(map[string]any)["from"], "the join CIDR, through the Package")
	a := newApplier(t, cp.Config)
	objs, err := r.Objects()
	require.NoError(t, err)
	for _, o := range objs {
		assert.NoError(t, a.apply(ctx, o, false), "%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
	}
	pod := podFrom(t, r, "DaemonSet", "cozy-health-agent", "cozy-health")
	_, err = cp.Clientset().CoreV1().Pods("cozy-health").Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	assert.NoError(t, err, "the agent's pod in the namespace the operator labelled")
}

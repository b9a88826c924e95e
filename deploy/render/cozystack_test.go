package render

import (
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/cozy-health/deploy"
)

// cozystackValues is what Cozystack's package operator gives a component's
// HelmRelease besides the Package's values: Secret cozystack-values
// (packages/core/platform/templates/apps.yaml), top-level _cluster.
var cozystackValues = map[string]any{"_cluster": map[string]any{
	"root-host": "example.org", "bundle-name": "isp-full", "cluster-domain": "cozy.local", "oidc-enabled": "false",
	"branding": map[string]any{"brandName": "X"}, "scheduling": map[string]any{"globalAppTopologySpreadConstraints": ""},
}}

// TestCozystackPackageSource: the PackageSource installs the wrapper chart
// as release cozy-health into namespace cozy-health (the namespace the Talos
// patch allows), privileged (the operator labels the namespace), with CRDs
// replaced on upgrade; the upstream chart is a library, not a symlink.
func TestCozystackPackageSource(t *testing.T) {
	ps, err := LoadPackageSource()
	require.NoError(t, err)
	assert.Equal(t, "cozystack.cozy-health", ps.Metadata.Name)
	require.Len(t, ps.Spec.Variants, 1)
	v := ps.Spec.Variants[0]
	assert.Equal(t, "default", v.Name)
	assert.Equal(t, []string{"cozystack.networking", "cozystack.cert-manager", "cozystack.victoria-metrics-operator"}, v.DependsOn)
	require.Len(t, v.Components, 3)
	c := v.Components[0]
	assert.Equal(t, "system/cozy-health", c.Path)
	require.NotNil(t, c.Install)
	assert.Equal(t, "cozy-health", c.Install.Namespace)
	assert.Equal(t, "cozy-health", c.Install.ReleaseName)
	assert.True(t, c.Install.Privileged)
	assert.Equal(t, "CreateReplace", c.Install.UpgradeCRDs)
	// The API-gated objects, each its own release beside it.
	for i, name := range []string{"cozy-health-talos", "cozy-health-linstor"} {
		g := v.Components[i+1]
		assert.Equal(t, name, g.Name)
		assert.Equal(t, "system/"+name, g.Path)
		assert.Empty(t, g.Libraries)
		require.NotNil(t, g.Install)
		assert.Equal(t, "cozy-health", g.Install.Namespace)
		assert.Equal(t, name, g.Install.ReleaseName)
	}

	// Nothing in the package is a symlink (Flux drops them from artifacts).
	require.NoError(t, filepath.WalkDir(filepath.Join(repoRoot(t), deploy.CozystackDir), func(p string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		assert.Zero(t, d.Type()&fs.ModeSymlink, "%s is a symlink", p)
		return nil
	}))
}

// TestCozystackWrapperChart: the wrapper is written as Cozystack's are
// (name cozy-<dir>, version 0.0.0, no dependencies:), and the artifact the
// operator assembles (wrapper + library under charts/) lints and renders.
func TestCozystackWrapperChart(t *testing.T) {
	ps, err := LoadPackageSource()
	require.NoError(t, err)
	c, err := LoadCozystackComponent(ps, "default", "cozy-health")
	require.NoError(t, err)
	assert.Equal(t, "cozy-cozy-health", c.Metadata.Name)
	assert.Equal(t, "0.0.0", c.Metadata.Version)
	assert.Empty(t, c.Metadata.Dependencies)
	assert.Empty(t, c.Metadata.Annotations, "no cozystack.io/privileged: the PackageSource says it")
	require.Len(t, c.Dependencies(), 1)
	assert.Equal(t, "cozy-health", c.Dependencies()[0].Name())
	assert.Empty(t, c.Dependencies()[0].Metadata.Annotations)

	// helm lint --strict on the assembled artifact, with Cozystack's values.
	dir := t.TempDir()
	require.NoError(t, os.CopyFS(dir, os.DirFS(filepath.Join(repoRoot(t), deploy.CozystackDir, "packages", "system", "cozy-health"))))
	require.NoError(t, os.CopyFS(filepath.Join(dir, "charts", "cozy-health"), deploy.Chart()))
	// Cozystack's wrappers list no dependencies: (Helm renders charts/ all
	// the same), which helm lint alone reports; every other message counts.
	var lintMsgs []string
	for _, m := range Lint(dir, cozystackValues, "cozy-health") {
		lintMsgs = append(lintMsgs, m.Error())
	}
	require.Len(t, lintMsgs, 1, "%v", lintMsgs)
	assert.Contains(t, lintMsgs[0], "chart metadata is missing these dependencies: cozy-health")

	// Cozystack: cert-manager, VictoriaMetrics, Cilium, grafana-operator,
	// Talos with the patch applied.
	all := []string{"cert-manager.io/v1", "operator.victoriametrics.com/v1beta1", "cilium.io/v2", "grafana.integreatly.org/v1beta1", "talos.dev/v1alpha1"}
	r, err := RenderChart(c, Options{Values: cozystackValues, APIVersions: all})
	require.NoError(t, err)
	kinds := map[string]int{}
	for _, m := range r.Manifests {
		kinds[m.Kind]++
	}
	for _, k := range []string{"DaemonSet", "Deployment", "Certificate", "Issuer", "VMServiceScrape", "VMRule", "CiliumNetworkPolicy"} {
		assert.Positive(t, kinds[k], "the package renders a %s", k)
	}
	assert.Zero(t, kinds["Namespace"])
	assert.Zero(t, kinds["GrafanaDashboard"], "the dashboard is Cozystack's dashboards/cozy-health, for the root Grafana only")
	_, err = r.Object("ConfigMap", "cozy-health-kube-state-metrics")
	assert.ErrorIs(t, err, ErrNotFound, "monitoring-agents' kube-state-metrics takes the entry")
	_, err = r.Object("ServiceAccount", "cozy-health-agent-talos-secrets")
	assert.ErrorIs(t, err, ErrNotFound, "the component cozy-health-talos has it")
	_, err = r.Object("Role", "cozy-health-aggregator-linstor-client")
	assert.ErrorIs(t, err, ErrNotFound, "the component cozy-health-linstor has it")
	assert.NotEmpty(t, r.CRDs, "the library's CRD comes along")
	crb, err := r.Object("ClusterRoleBinding", "cozy-health-drain-check")
	require.NoError(t, err)
	assert.Equal(t, []any{map[string]any{"kind": "Group", "name": "cozystack-cluster-admin", "apiGroup": "rbac.authorization.k8s.io"}}, crb.Object["subjects"])
	cert, err := r.Object("Certificate", "cozy-health-aggregator")
	require.NoError(t, err)
	assert.Contains(t, nested(t, cert, "spec", "dnsNames"), "cozy-health-aggregator-ingest.cozy-health.svc.cozy.local")
	sc, err := r.Object("VMServiceScrape", "cozy-health-aggregator")
	require.NoError(t, err)
	assert.Equal(t, []any{map[string]any{"targetLabel": "tier", "replacement": "cluster"}}, nested(t, sc, "spec", "endpoints", 0, "relabelConfigs"))

	// isp-hosted (networking noop: no Cilium), before the Talos patch, no
	// VictoriaMetrics: nothing of those APIs, and the release still renders.
	r, err = RenderChart(c, Options{Values: cozystackValues, APIVersions: []string{"cert-manager.io/v1"}})
	require.NoError(t, err)
	for _, m := range r.Manifests {
		assert.NotContains(t, []string{"CiliumNetworkPolicy", "VMServiceScrape", "VMRule", "ServiceMonitor", "PrometheusRule", "GrafanaDashboard"}, m.Kind)
		assert.False(t, m.Kind == "ServiceAccount" && m.Source == "charts/cozy-health/templates/talos-serviceaccount.yaml", "the Talos ServiceAccount before the patch")
	}
	np, err := r.Object("NetworkPolicy", "cozy-health-aggregator")
	require.NoError(t, err)
	assert.Equal(t, []any{map[string]any{"ipBlock": map[string]any{"cidr": "100.64.0.0/16"}}}, nested(t, np, "spec", "ingress", 1, "from"))
}

// TestCozystackMakefile: the wrapper's Makefile exports NAME and NAMESPACE
// and includes Cozystack's hack/package.mk (whose show/apply/diff targets
// run cozyhr -n $(NAMESPACE) $(NAME)), naming release cozy-health in
// namespace cozy-health (before, it computed cozy-cozy-health).
func TestCozystackMakefile(t *testing.T) {
	mk, err := exec.LookPath("make")
	require.NoError(t, err, "make is part of the toolchain")
	// Cozystack's tree around the package: hack/ with the two included
	// files, written to print what package.mk's targets use.
	root := t.TempDir()
	pkg := filepath.Join(root, "packages", "system", "cozy-health")
	require.NoError(t, os.MkdirAll(pkg, 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "hack"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "hack", "common-envs.mk"), nil, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, "hack", "package.mk"), []byte("show:\n\t@echo \"$$NAME $$NAMESPACE\"\n"), 0o644))
	src, err := os.ReadFile(filepath.Join(repoRoot(t), deploy.CozystackDir, "packages", "system", "cozy-health", "Makefile"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(pkg, "Makefile"), src, 0o644))
	cmd := exec.Command(mk, "-s", "show")
	cmd.Dir = pkg
	cmd.Env = append(os.Environ(), "NAME=", "NAMESPACE=")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Equal(t, "cozy-health cozy-health", strings.TrimSpace(string(out)), "exported to package.mk's recipes")
}

// TestChartTakesCozystackClusterValues: the _cluster values Cozystack's
// operator injects pass the schema, and its cluster domain names the
// serving certificate unless tls.clusterDomain says otherwise.
func TestChartTakesCozystackClusterValues(t *testing.T) {
	apis := []string{"cert-manager.io/v1"}
	dns := func(t *testing.T, o Options) []any {
		t.Helper()
		r, err := Render(o)
		require.NoError(t, err)
		cert, err := r.Object("Certificate", "cozy-health-aggregator")
		require.NoError(t, err)
		return nested(t, cert, "spec", "dnsNames").([]any)
	}
	assert.Contains(t, dns(t, Options{APIVersions: apis, Values: cozystackValues}), "cozy-health-aggregator.cozy-health.svc.cozy.local")
	assert.Contains(t, dns(t, Options{APIVersions: apis}), "cozy-health-aggregator.cozy-health.svc.cluster.local", "Kubernetes' default without _cluster")
	v := map[string]any{"_cluster": cozystackValues["_cluster"], "tls": map[string]any{"clusterDomain": "corp.example."}}
	got := dns(t, Options{APIVersions: apis, Values: v})
	assert.Contains(t, got, "cozy-health-aggregator.cozy-health.svc.corp.example")
	assert.NotContains(t, got, "cozy-health-aggregator.cozy-health.svc.cozy.local")
	r, err := Render(Options{Values: cozystackValues})
	require.NoError(t, err)
	assert.Contains(t, configYAML(t, r), "tls-cluster-domain: cozy.local")

	_, err = Render(Options{Values: map[string]any{"_cluster": map[string]any{"cluster-domain": "Not A Domain"}}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "/_cluster/cluster-domain")
}

// TestCozystackGeneratedCopies: the dashboard Cozystack serves is the
// chart's, and the monitoring-agents entry is the chart's kube-state-metrics
// config with the RBAC it needs.
func TestCozystackGeneratedCopies(t *testing.T) {
	files, err := GeneratedFiles()
	require.NoError(t, err)
	var a, b map[string]any
	src, err := fs.ReadFile(deploy.Chart(), "files/dashboard.json")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(src, &a))
	require.NoError(t, json.Unmarshal(files[CozystackDashboardFile], &b))
	assert.Equal(t, a, b)
	list, err := fs.ReadFile(deploy.Cozystack(), "snippets/dashboards-infra.list")
	require.NoError(t, err)
	assert.Equal(t, "cozy-health/cozy-health", strings.TrimSpace(string(list)), "dashboards-infra.list names dashboards/<group>/<name>.json")
	_, err = fs.Stat(deploy.Cozystack(), "dashboards/cozy-health/cozy-health.json")
	require.NoError(t, err)

	var ksm struct {
		KSM struct {
			RBAC struct {
				ExtraRules []map[string][]string `json:"extraRules"`
			} `json:"rbac"`
			CRS struct {
				Enabled bool `json:"enabled"`
				Config  struct {
					Spec struct {
						Resources []map[string]any `json:"resources"`
					} `json:"spec"`
				} `json:"config"`
			} `json:"customResourceState"`
		} `json:"kube-state-metrics"`
	}
	require.NoError(t, yaml.UnmarshalStrict(files[CozystackKSMFile], &ksm))
	assert.Equal(t, []map[string][]string{{"apiGroups": {"health.cozystack.io"}, "resources": {"healths"}, "verbs": {"list", "watch"}}}, ksm.KSM.RBAC.ExtraRules)
	require.Len(t, ksm.KSM.CRS.Config.Spec.Resources, 1)
	r, err := Render(Options{Set: []string{"monitoring.kubeStateMetrics.customResourceState=true"}})
	require.NoError(t, err)
	cm, err := r.Object("ConfigMap", "cozy-health-kube-state-metrics")
	require.NoError(t, err)
	var cfg struct {
		Spec struct {
			Resources []map[string]any `json:"resources"`
		} `json:"spec"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(nested(t, cm, "data", "config.yaml").(string)), &cfg))
	assert.Equal(t, cfg.Spec.Resources, ksm.KSM.CRS.Config.Spec.Resources, "one entry, two carriers")
}

// TestCozystackGatedComponents: the components cozy-health-talos and
// cozy-health-linstor render, on a cluster serving none of the optional
// APIs, exactly the objects the chart renders where those APIs are served
// (the Talos ServiceAccount the agent mounts the Secret of, the Role and
// RoleBinding on LINSTOR's client Secret for the aggregator).
func TestCozystackGatedComponents(t *testing.T) {
	ps, err := LoadPackageSource()
	require.NoError(t, err)
	for comp, want := range map[string]struct {
		api, source string
	}{
		"cozy-health-talos":   {"talos.dev/v1alpha1", "templates/talos-serviceaccount.yaml"},
		"cozy-health-linstor": {"piraeus.io/v1", "templates/linstor-rbac.yaml"},
	} {
		c, err := LoadCozystackComponent(ps, "default", comp)
		require.NoError(t, err)
		assert.Equal(t, "cozy-"+comp, c.Name())
		assert.Equal(t, "0.0.0", c.Metadata.Version)
		got, err := RenderChart(c, Options{Release: comp, Namespace: "cozy-health"})
		require.NoError(t, err, comp)
		main, err := Render(Options{APIVersions: []string{want.api}})
		require.NoError(t, err)
		var wantObjs []map[string]any
		for _, m := range main.Manifests {
			if m.Source == want.source {
				var o map[string]any
				require.NoError(t, yaml.Unmarshal([]byte(m.Content), &o))
				wantObjs = append(wantObjs, o)
			}
		}
		require.NotEmpty(t, wantObjs)
		objs, err := got.Objects()
		require.NoError(t, err)
		var gotObjs []map[string]any
		for _, o := range objs {
			gotObjs = append(gotObjs, o.Object)
		}
		assert.Equal(t, wantObjs, gotObjs, "%s renders the chart's own objects, ungated", comp)
	}
}

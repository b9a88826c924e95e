package render

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/cozystack/cozy-health/deploy"
)

// repoRoot is the repository root (this package is deploy/render).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	return root
}

// containerArgs returns the args of the first container of a workload.
func containerArgs(t *testing.T, obj *unstructured.Unstructured) []string {
	t.Helper()
	cs, ok, err := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
	require.NoError(t, err)
	require.True(t, ok, "%s has no containers", obj.GetName())
	raw, _ := cs[0].(map[string]any)["args"].([]any)
	out := make([]string, 0, len(raw))
	for _, a := range raw {
		out = append(out, a.(string))
	}
	return out
}

func TestHelmLintPasses(t *testing.T) {
	dir := filepath.Join(repoRoot(t), deploy.ChartDir)
	for name, vals := range map[string]map[string]any{
		"defaults":  nil,
		"delegated": {"aggregator": map[string]any{"drainAuth": "delegated"}},
		"namespace": {"namespace": map[string]any{"create": true}},
	} {
		t.Run(name, func(t *testing.T) {
			msgs := Lint(dir, vals, DefaultNamespace)
			for _, m := range msgs {
				t.Errorf("helm lint: %s", m)
			}
		})
	}
}

// A broken chart is what lint is for: prove it finds one.
func TestHelmLintFindsABrokenTemplate(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.CopyFS(dir, deploy.Chart()))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "templates", "broken.yaml"), []byte("kind: ConfigMap\n{{ .Values.nope.deeper }}\n"), 0o644))
	msgs := Lint(dir, nil, DefaultNamespace)
	require.NotEmpty(t, msgs)
	assert.Contains(t, msgs[0].Err.Error(), "nope")
}

func TestSchemaAndChecksRejectBadValues(t *testing.T) {
	cases := []struct {
		name string
		vals map[string]any
		want string // part of the error naming the value
	}{
		{"unknown key", map[string]any{"agent": map[string]any{"intervall": "5s"}}, "'intervall' not allowed"},
		{"bad duration", map[string]any{"agent": map[string]any{"interval": "5 seconds"}}, "/agent/interval"},
		{"interval below 1s", map[string]any{"agent": map[string]any{"interval": "500ms", "checkDeadline": "100ms"}}, "agent.interval 500ms: must be at least 1s"},
		{"deadline not shorter than interval", map[string]any{"agent": map[string]any{"checkDeadline": "5s"}}, "agent.checkDeadline 5s: must be positive and shorter than agent.interval 5s"},
		{"thresholds out of order", map[string]any{"agent": map[string]any{"thresholds": map[string]any{"diskLatency": map[string]any{"degraded": "1s", "down": "100ms"}}}}, "agent.thresholds.diskLatency: degraded 1s / down 100ms"},
		{"ping loss out of order", map[string]any{"agent": map[string]any{"thresholds": map[string]any{"kubeOVNPingLoss": map[string]any{"degraded": 0.5, "down": 0.1}}}}, "agent.thresholds.kubeOVNPingLoss"},
		{"ping loss above 1", map[string]any{"agent": map[string]any{"thresholds": map[string]any{"kubeOVNPingLoss": map[string]any{"degraded": 0.5, "down": 2}}}}, "/agent/thresholds/kubeOVNPingLoss/down"},
		{"fsync window below samples", map[string]any{"agent": map[string]any{"sources": map[string]any{"fsyncProbe": map[string]any{"samples": 10, "window": 5}}}}, "agent.sources.fsyncProbe.window 5"},
		{"URL without scheme", map[string]any{"aggregator": map[string]any{"linstor": map[string]any{"url": "linstor:3371"}}}, "/aggregator/linstor/url"},
		{"relative host path", map[string]any{"agent": map[string]any{"sources": map[string]any{"cilium": map[string]any{"runPath": "run/cilium"}}}}, "/agent/sources/cilium/runPath"},
		{"digest not sha256", map[string]any{"aggregator": map[string]any{"image": "ghcr.io/cozystack/cozystack/cozy-health-aggregator:0.1.0@latest"}}, "/aggregator/image"},
		{"image without tag or digest", map[string]any{"agent": map[string]any{"image": "ghcr.io/cozystack/cozystack/cozy-health-agent"}}, "/agent/image"},
		{"image as the old mapping", map[string]any{"agent": map[string]any{"image": map[string]any{"digest": "sha256:" + strings.Repeat("ab", 32)}}}, "/agent/image"},
		{"drain auth", map[string]any{"aggregator": map[string]any{"drainAuth": "open"}}, "/aggregator/drainAuth"},
		{"root aggregator", map[string]any{"aggregator": map[string]any{"runAsUser": 0}}, "/aggregator/runAsUser"},
		{"renew deadline", map[string]any{"aggregator": map[string]any{"leaderElection": map[string]any{"renewDeadline": "20s"}}}, "aggregator.leaderElection.renewDeadline 20s"},
		{"retry period", map[string]any{"aggregator": map[string]any{"leaderElection": map[string]any{"retryPeriod": "10s"}}}, "aggregator.leaderElection.retryPeriod 10s"},
		{"refresh period", map[string]any{"aggregator": map[string]any{"refreshPeriod": "1m"}}, "aggregator.refreshPeriod 1m"},
		{"report interval", map[string]any{"aggregator": map[string]any{"reportInterval": "100ms", "refreshPeriod": "100ms"}}, "aggregator.reportInterval 100ms"},
		{"ports clash", map[string]any{"aggregator": map[string]any{"ports": map[string]any{"grpc": 9443, "http": 9443, "metrics": 9090}}}, "aggregator.ports"},
		{"open drain check", map[string]any{"networkPolicy": map[string]any{"podCIDRs": []any{}}}, "networkPolicy.nodeCIDRs"},
		{"bad node CIDR", map[string]any{"networkPolicy": map[string]any{"nodeCIDRs": []any{"192.168.1.1"}}}, "/networkPolicy/nodeCIDRs/0"},
		{"metrics auth", map[string]any{"aggregator": map[string]any{"metricsAuth": "open"}}, "/aggregator/metricsAuth"},
		{"bad CIDR", map[string]any{"networkPolicy": map[string]any{"podCIDRs": []any{"10.244.0.0"}}}, "/networkPolicy/podCIDRs/0"},
		{"log level", map[string]any{"aggregator": map[string]any{"logLevel": "verbose"}}, "/aggregator/logLevel"},
		{"talos role", map[string]any{"talos": map[string]any{"serviceAccount": map[string]any{"roles": []any{"os:superuser"}}}}, "/talos/serviceAccount/roles/0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Render(Options{Values: c.vals})
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

func TestDefaultsRender(t *testing.T) {
	r, err := Render(Options{})
	require.NoError(t, err)
	require.Len(t, r.CRDs, 1)
	assert.Equal(t, "healths.health.cozystack.io", r.CRDs[0].Name)
	kinds := map[string]int{}
	for _, m := range r.Manifests {
		kinds[m.Kind]++
	}
	// The release namespace is never the release's by default; the platform
	// namespace is rendered where a lookup does not find it (helm template
	// finds nothing), kept on uninstall.
	ns, err := r.Object("Namespace", "cozy-system")
	require.NoError(t, err)
	assert.Equal(t, "keep", ns.GetAnnotations()["helm.sh/resource-policy"])
	assert.Equal(t, 1, kinds["Namespace"], "Helm installs never own the release namespace by default")
	r2, err := Render(Options{Set: []string{"platformNamespaceCreate=false"}})
	require.NoError(t, err)
	_, err = r2.Object("Namespace", "cozy-system")
	assert.ErrorIs(t, err, ErrNotFound)
	r2, err = Render(Options{Set: []string{"platformNamespace=cozy-health"}})
	require.NoError(t, err)
	_, err = r2.Object("Namespace", "cozy-health")
	assert.ErrorIs(t, err, ErrNotFound, "the release namespace is not created twice")
	for _, k := range []string{"DaemonSet", "Deployment", "PodDisruptionBudget", "NetworkPolicy", "ConfigMap"} {
		assert.Equal(t, 1, kinds[k], k)
	}
	assert.Equal(t, 2, kinds["Service"], "the aggregator's (ready replicas: drain-check, scrapes) and the agents' -ingest")
	svc, err := r.Object("Service", "cozy-health-aggregator")
	require.NoError(t, err)
	assert.Nil(t, nested(t, svc, "spec", "publishNotReadyAddresses"), "the API service proxy reaches only ready replicas")
	ingest, err := r.Object("Service", "cozy-health-aggregator-ingest")
	require.NoError(t, err)
	assert.Equal(t, true, nested(t, ingest, "spec", "publishNotReadyAddresses"), "agents reach a warming replica")
	assert.Equal(t, "None", nested(t, ingest, "spec", "clusterIP"))
	assert.Equal(t, nested(t, svc, "spec", "selector"), nested(t, ingest, "spec", "selector"))
	assert.NotContains(t, ingest.GetLabels(), "app.kubernetes.io/name", "no monitor selects it: scrapes go through the ready Service")
	cfgText := configYAML(t, r)
	assert.Contains(t, cfgText, "tls-service: cozy-health-aggregator,cozy-health-aggregator-ingest")
	assert.Contains(t, cfgText, "warm-up-max: 45s")
	assert.Equal(t, 3, kinds["ClusterRoleBinding"], "aggregator; the adapters' Health objects in every namespace; the agent's get nodes")
	assert.Equal(t, 3, kinds["Role"], "Health objects and Lease; the TLS Secret and CA ConfigMap; the kubelets' Leases in kube-node-lease (the LINSTOR client Secret's only where piraeus.io/v1 is served)")
	assert.Equal(t, 3, kinds["RoleBinding"])
	assert.Equal(t, 6, kinds["ClusterRole"], "aggregator, the adapters' Health objects, drain-check, tenant view, agent (get nodes), metrics reader")
	assert.Contains(t, cfgText, "metrics-auth: delegated")
	agentRole, err := r.Object("ClusterRole", "cozy-health-agent")
	require.NoError(t, err)
	rules, _, _ := unstructured.NestedSlice(agentRole.Object, "rules")
	assert.Equal(t, []any{map[string]any{"apiGroups": []any{""}, "resources": []any{"nodes"}, "verbs": []any{"get"}}}, rules,
		"the agent reads Nodes (its own control-plane label) and nothing else")

	ds, err := r.Object("DaemonSet", "cozy-health-agent")
	require.NoError(t, err)
	args := containerArgs(t, ds)
	assert.Contains(t, args, "--aggregator=cozy-health-aggregator-ingest.cozy-health.svc:9443", "the Service that lists warming replicas too")
	assert.Contains(t, args, "--talos-node=$(HOST_IP)")
	assert.Contains(t, args, "--drbdsetup=", "the image has no drbdsetup: DRBD state comes from LINSTOR")
	assert.Contains(t, args, "--etcd-db-quota-bytes=2147483648", "no float formatting of large integers")
	// kube-ovn from the node's own sockets (Cozystack's OVN_DIR is
	// /var/lib/ovn); the pinger is on the pod network, off by default.
	for _, a := range []string{"--ovs-db-socket=/run/openvswitch/db.sock", "--ovn-nb-ctl=/var/run/ovn/ovnnb_db.ctl", "--ovn-sb-ctl=/var/run/ovn/ovnsb_db.ctl",
		"--ovn-controller-pidfile=/var/run/ovn/ovn-controller.pid", "--ovn-db-dir=/var/lib/ovn", "--cilium-health-socket=/var/run/cilium/health.sock", "--kube-ovn-pinger-url="} {
		assert.Contains(t, args, a)
	}
	// Cozystack's image path, pinned by `make push`.
	assert.Regexp(t, `^ghcr\.io/cozystack/cozystack/cozy-health-agent:0\.1\.0@sha256:[0-9a-f]{64}$`, nested(t, ds, "spec", "template", "spec", "containers", 0, "image"))
	assert.Equal(t, "RuntimeDefault", nested(t, ds, "spec", "template", "spec", "securityContext", "seccompProfile", "type"))
	assert.Equal(t, "127.0.0.1", nested(t, ds, "spec", "template", "spec", "containers", 0, "livenessProbe", "httpGet", "host"))

	dep, err := r.Object("Deployment", "cozy-health-aggregator")
	require.NoError(t, err)
	assert.EqualValues(t, 3, nested(t, dep, "spec", "replicas"))
	assert.Equal(t, "kubernetes.io/hostname", nested(t, dep, "spec", "template", "spec", "topologySpreadConstraints", 0, "topologyKey"))
	assert.Equal(t, true, nested(t, dep, "spec", "template", "spec", "securityContext", "runAsNonRoot"))

	cr, err := r.Object("ClusterRole", "cozy-health-aggregator")
	require.NoError(t, err)
	assert.Contains(t, cr.Object["rules"], map[string]any{"apiGroups": []any{"authorization.k8s.io"}, "resources": []any{"subjectaccessreviews"}, "verbs": []any{"create"}},
		"SubjectAccessReviews: the gRPC drain check and /metrics are always delegated")
	view, err := r.Object("ClusterRole", "cozy-health-view")
	require.NoError(t, err)
	assert.Equal(t, "true", view.GetLabels()["rbac.cozystack.io/aggregate-to-tenant-view"])
	assert.Equal(t, "true", view.GetLabels()["rbac.authorization.k8s.io/aggregate-to-view"])
}

func TestDelegatedDrainAuth(t *testing.T) {
	r, err := Render(Options{Set: []string{"aggregator.drainAuth=delegated"}})
	require.NoError(t, err)
	cr, err := r.Object("ClusterRole", "cozy-health-aggregator")
	require.NoError(t, err)
	assert.Contains(t, cr.Object["rules"], map[string]any{"apiGroups": []any{"authorization.k8s.io"}, "resources": []any{"subjectaccessreviews"}, "verbs": []any{"create"}})
	assert.Contains(t, cr.Object["rules"], map[string]any{"apiGroups": []any{"authentication.k8s.io"}, "resources": []any{"tokenreviews"}, "verbs": []any{"create"}})
	_, err = r.Object("NetworkPolicy", "cozy-health-aggregator")
	assert.NoError(t, err, "the ports are allow-listed whatever the drain check's auth")
	cm, err := r.Object("ConfigMap", "cozy-health-aggregator")
	require.NoError(t, err)
	assert.Contains(t, cm.Object["data"].(map[string]any)["config.yaml"], "drain-auth: delegated")
}

func TestImageByDigest(t *testing.T) {
	d := "sha256:" + strings.Repeat("ab", 32)
	ref := "registry.example:5000/cozy/cozy-health-agent:v1@" + d
	r, err := Render(Options{Set: []string{"agent.image=" + ref}})
	require.NoError(t, err)
	ds, err := r.Object("DaemonSet", "cozy-health-agent")
	require.NoError(t, err)
	assert.Equal(t, ref, nested(t, ds, "spec", "template", "spec", "containers", 0, "image"))
}

func TestDisabledSourcesDropTheirMounts(t *testing.T) {
	r, err := Render(Options{Values: map[string]any{"agent": map[string]any{"sources": map[string]any{
		"talos": map[string]any{"enabled": false}, "cilium": map[string]any{"runPath": ""},
		"fsyncProbe": map[string]any{"hostPath": ""}, "diskstats": map[string]any{"enabled": false},
		"kubeOVN":  map[string]any{"ovsRunPath": "", "ovnRunPath": "", "ovnDBPath": ""},
		"nodeRole": map[string]any{"enabled": false},
	}}}})
	require.NoError(t, err)
	ds, err := r.Object("DaemonSet", "cozy-health-agent")
	require.NoError(t, err)
	args := containerArgs(t, ds)
	for _, a := range []string{"--talosconfig=", "--kube-api-token-file=", "--cilium-socket=", "--cilium-health-socket=", "--fsync-probe-dir=", "--proc-root=",
		"--ovs-db-socket=", "--ovn-controller-pidfile=", "--ovn-nb-ctl=", "--ovn-sb-ctl=", "--ovn-db-dir="} {
		assert.Contains(t, args, a)
	}
	vols, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "volumes")
	var names []string
	for _, v := range vols {
		names = append(names, v.(map[string]any)["name"].(string))
	}
	assert.ElementsMatch(t, []string{"token", "aggregator-ca"}, names, "no hostPath left when every host source is off")
	_, err = r.Object("ServiceAccount", "cozy-health-agent-talos-secrets")
	assert.ErrorIs(t, err, ErrNotFound)
	_, err = r.Object("ClusterRole", "cozy-health-agent")
	assert.ErrorIs(t, err, ErrNotFound)
}

func TestNodeSelectorReachesTheAggregator(t *testing.T) {
	r, err := Render(Options{Values: map[string]any{"agent": map[string]any{"nodeSelector": map[string]any{"kubernetes.io/os": "linux", "node-role.kubernetes.io/worker": ""}}}})
	require.NoError(t, err)
	cm, err := r.Object("ConfigMap", "cozy-health-aggregator")
	require.NoError(t, err)
	assert.Contains(t, cm.Object["data"].(map[string]any)["config.yaml"], `node-selector: "kubernetes.io/os=linux,node-role.kubernetes.io/worker="`)
}

// The committed generated files (plain manifests, the Talos
// ServiceAccount, the LINSTOR client Role, Cozystack's dashboard and
// kube-state-metrics entry) are
// what the chart renders today (make verify-generate checks the same
// through make generate).
func TestGeneratedFilesUpToDate(t *testing.T) {
	files, err := GeneratedFiles()
	require.NoError(t, err)
	require.Len(t, files, 7)
	for p, want := range files {
		got, err := os.ReadFile(filepath.Join(repoRoot(t), p))
		require.NoError(t, err, "run make manifests")
		assert.Equal(t, string(want), string(got), "%s is stale: run make manifests", p)
	}
	r, err := Render(ManifestsOptions)
	require.NoError(t, err)
	assert.True(t, strings.HasSuffix(string(deploy.Manifests()), string(r.YAML())), "the embedded plain manifests are the file")
}

// Helm is a large dependency: it stays out of the shipped binaries.
func TestBinariesDoNotLinkHelm(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/cozystack/cozy-health/agent", "github.com/cozystack/cozy-health/aggregator").CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "go.uber.org/zap", "the listing is real")
	assert.NotContains(t, string(out), "helm.sh/")
}

// nested reads obj at path; ints index slices.
func nested(t *testing.T, obj *unstructured.Unstructured, path ...any) any {
	t.Helper()
	var cur any = obj.Object
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := cur.(map[string]any)
			require.True(t, ok, "%v: not a map at %q", path, k)
			cur = m[k]
		case int:
			s, ok := cur.([]any)
			require.True(t, ok && k < len(s), "%v: no index %d", path, k)
			cur = s[k]
		}
	}
	return cur
}

// TestNetworkPolicyAllowLists: the aggregator's gRPC and HTTP ports admit
// only the nodes: the listed node networks, or with Cilium the host,
// remote-node and kube-apiserver entities. Before, the HTTP port admitted
// everything but the listed pod networks, and gRPC everything.
func TestNetworkPolicyAllowLists(t *testing.T) {
	t.Run("node networks", func(t *testing.T) {
		r, err := Render(Options{Set: []string{"networkPolicy.nodeCIDRs={192.168.10.0/24,fd00:10::/64}"}})
		require.NoError(t, err)
		np, err := r.Object("NetworkPolicy", "cozy-health-aggregator")
		require.NoError(t, err)
		ingress := nested(t, np, "spec", "ingress").([]any)
		require.Len(t, ingress, 3)
		assert.Equal(t, []any{map[string]any{"podSelector": map[string]any{"matchLabels": map[string]any{"app.kubernetes.io/name": "cozy-health-aggregator"}}}},
			nested(t, np, "spec", "ingress", 2, "from"), "grpc from the other replicas: the peer sync")
		assert.Equal(t, []any{map[string]any{"port": "metrics", "protocol": "TCP"}}, nested(t, np, "spec", "ingress", 0, "ports"))
		assert.Nil(t, nested(t, np, "spec", "ingress", 0, "from"), "metrics: guarded by metricsAuth")
		assert.Equal(t, []any{map[string]any{"port": "grpc", "protocol": "TCP"}, map[string]any{"port": "http", "protocol": "TCP"}}, nested(t, np, "spec", "ingress", 1, "ports"))
		assert.Equal(t, []any{
			map[string]any{"ipBlock": map[string]any{"cidr": "192.168.10.0/24"}},
			map[string]any{"ipBlock": map[string]any{"cidr": "fd00:10::/64"}},
		}, nested(t, np, "spec", "ingress", 1, "from"), "only the nodes, no except-list")
		_, err = r.Object("CiliumNetworkPolicy", "cozy-health-aggregator")
		assert.ErrorIs(t, err, ErrNotFound)
	})
	t.Run("cilium", func(t *testing.T) {
		r, err := Render(Options{APIVersions: []string{"cilium.io/v2"}, Set: []string{"networkPolicy.nodeCIDRs={100.64.0.0/16}"}})
		require.NoError(t, err)
		_, err = r.Object("NetworkPolicy", "cozy-health-aggregator")
		assert.ErrorIs(t, err, ErrNotFound)
		cnp, err := r.Object("CiliumNetworkPolicy", "cozy-health-aggregator")
		require.NoError(t, err)
		assert.Equal(t, []any{"host", "remote-node", "kube-apiserver"}, nested(t, cnp, "spec", "ingress", 0, "fromEntities"))
		assert.Equal(t, []any{map[string]any{"port": "9443", "protocol": "TCP"}, map[string]any{"port": "8080", "protocol": "TCP"}},
			nested(t, cnp, "spec", "ingress", 0, "toPorts", 0, "ports"))
		assert.Equal(t, []any{"100.64.0.0/16"}, nested(t, cnp, "spec", "ingress", 1, "fromCIDR"))
		assert.Equal(t, []any{map[string]any{"port": "9090", "protocol": "TCP"}}, nested(t, cnp, "spec", "ingress", 2, "toPorts", 0, "ports"))
	})
}

// TestScrapeSendsItsToken: with metricsAuth delegated (the default) the
// scrape objects authenticate with the scraper's ServiceAccount token, and
// a ClusterRole grants get on /metrics to the listed subjects.
func TestScrapeSendsItsToken(t *testing.T) {
	for _, api := range []struct{ api, kind string }{{"operator.victoriametrics.com/v1beta1", "VMServiceScrape"}, {"monitoring.coreos.com/v1", "ServiceMonitor"}} {
		r, err := Render(Options{APIVersions: []string{api.api}, Values: map[string]any{"monitoring": map[string]any{"scrape": map[string]any{
			"subjects": []any{map[string]any{"kind": "ServiceAccount", "name": "vmagent", "namespace": "cozy-monitoring"}}}}}})
		require.NoError(t, err)
		sc, err := r.Object(api.kind, "cozy-health-aggregator")
		require.NoError(t, err)
		assert.Equal(t, "/var/run/secrets/kubernetes.io/serviceaccount/token", nested(t, sc, "spec", "endpoints", 0, "bearerTokenFile"))
		cr, err := r.Object("ClusterRole", "cozy-health-metrics-reader")
		require.NoError(t, err)
		assert.Equal(t, []any{map[string]any{"nonResourceURLs": []any{"/metrics"}, "verbs": []any{"get"}}}, cr.Object["rules"])
		crb, err := r.Object("ClusterRoleBinding", "cozy-health-metrics-reader")
		require.NoError(t, err)
		assert.Equal(t, "vmagent", nested(t, crb, "subjects", 0, "name"))
	}
	r, err := Render(Options{APIVersions: []string{"monitoring.coreos.com/v1"}, Set: []string{"aggregator.metricsAuth=none"}})
	require.NoError(t, err)
	sc, err := r.Object("ServiceMonitor", "cozy-health-aggregator")
	require.NoError(t, err)
	assert.Nil(t, nested(t, sc, "spec", "endpoints", 0, "bearerTokenFile"))
}

// TestAgentBlastRadius: the agent mounts no host /proc (diskstats reads the
// container's own, which is not namespaced) and runs as a non-root user
// unless a source that only root can reach is enabled. Before, it ran as
// root with the host's whole /proc.
func TestAgentBlastRadius(t *testing.T) {
	hostPaths := func(t *testing.T, r *Release) []string {
		ds, err := r.Object("DaemonSet", "cozy-health-agent")
		require.NoError(t, err)
		var out []string
		for _, v := range nested(t, ds, "spec", "template", "spec", "volumes").([]any) {
			if hp, ok := v.(map[string]any)["hostPath"].(map[string]any); ok {
				out = append(out, hp["path"].(string))
			}
		}
		return out
	}
	r, err := Render(Options{})
	require.NoError(t, err)
	assert.NotContains(t, hostPaths(t, r), "/proc")
	ds, err := r.Object("DaemonSet", "cozy-health-agent")
	require.NoError(t, err)
	assert.Contains(t, containerArgs(t, ds), "--proc-root=/proc")
	assert.EqualValues(t, 0, nested(t, ds, "spec", "template", "spec", "securityContext", "runAsUser"), "kube-ovn's sockets and the fsync probe need root")

	r, err = Render(Options{Set: []string{"agent.sources.kubeOVN.ovsRunPath=", "agent.sources.kubeOVN.ovnRunPath=", "agent.sources.fsyncProbe.hostPath="}})
	require.NoError(t, err)
	ds, err = r.Object("DaemonSet", "cozy-health-agent")
	require.NoError(t, err)
	sc := nested(t, ds, "spec", "template", "spec", "securityContext").(map[string]any)
	assert.EqualValues(t, 65532, sc["runAsUser"])
	assert.Equal(t, true, sc["runAsNonRoot"])
	assert.EqualValues(t, []any{0.0}, sc["supplementalGroups"], "group 0 reaches Cilium's 0660 sockets")
	assert.Equal(t, []string{"/var/run/cilium", "/var/lib/ovn"}, hostPaths(t, r))

	r, err = Render(Options{Set: []string{"agent.runAsUser=1000"}})
	require.NoError(t, err)
	ds, err = r.Object("DaemonSet", "cozy-health-agent")
	require.NoError(t, err)
	assert.EqualValues(t, 1000, nested(t, ds, "spec", "template", "spec", "securityContext", "runAsUser"))
}

// The LINSTOR client certificate is read where it lives: a Role on that one
// Secret in its namespace, bound to the aggregator, and the aggregator's
// configuration naming it; the agents mount nothing of LINSTOR's.
func TestLinstorSecretReadWhereItLives(t *testing.T) {
	r, err := Render(Options{APIVersions: []string{"piraeus.io/v1"}})
	require.NoError(t, err)
	role, err := r.Object("Role", "cozy-health-aggregator-linstor-client")
	require.NoError(t, err)
	assert.Equal(t, "cozy-linstor", role.GetNamespace())
	rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
	require.Len(t, rules, 1)
	rule := rules[0].(map[string]any)
	assert.Equal(t, []any{"secrets"}, rule["resources"])
	assert.Equal(t, []any{"linstor-client-tls"}, rule["resourceNames"])
	assert.Equal(t, []any{"get", "list", "watch"}, rule["verbs"])
	rb, err := r.Object("RoleBinding", "cozy-health-aggregator-linstor-client")
	require.NoError(t, err)
	assert.Equal(t, "cozy-linstor", rb.GetNamespace())
	assert.Equal(t, "cozy-health-aggregator", nested(t, rb, "subjects", 0, "name"))

	cm, err := r.Object("ConfigMap", "cozy-health-aggregator")
	require.NoError(t, err)
	conf := nested(t, cm, "data", "config.yaml").(string)
	for _, want := range []string{`linstor-url: "https://linstor-controller.cozy-linstor.svc:3371"`, `linstor-secret-namespace: "cozy-linstor"`,
		`linstor-secret: "linstor-client-tls"`, "linstor-interval: 10s"} {
		assert.Contains(t, conf, want)
	}
	ds, err := r.Object("DaemonSet", "cozy-health-agent")
	require.NoError(t, err)
	for _, a := range containerArgs(t, ds) {
		assert.NotContains(t, a, "linstor", "the agents do not read LINSTOR's controller")
	}

	r, err = Render(Options{})
	require.NoError(t, err)
	_, err = r.Object("Role", "cozy-health-aggregator-linstor-client")
	assert.ErrorIs(t, err, ErrNotFound, "piraeus.io/v1 not served: no Role in a namespace that may not exist")
	r, err = Render(Options{Set: []string{"aggregator.linstor.rbac=true"}})
	require.NoError(t, err)
	_, err = r.Object("Role", "cozy-health-aggregator-linstor-client")
	assert.NoError(t, err, "rbac=true renders it whatever the cluster serves")
	r, err = Render(Options{APIVersions: []string{"piraeus.io/v1"}, Set: []string{"aggregator.linstor.rbac=false"}})
	require.NoError(t, err)
	_, err = r.Object("Role", "cozy-health-aggregator-linstor-client")
	assert.ErrorIs(t, err, ErrNotFound, "rbac=false: never")
	r, err = Render(Options{APIVersions: []string{"piraeus.io/v1"}, Set: []string{"aggregator.linstor.url="}})
	require.NoError(t, err)
	_, err = r.Object("Role", "cozy-health-aggregator-linstor-client")
	assert.ErrorIs(t, err, ErrNotFound, "no LINSTOR URL: nothing to read")
	r, err = Render(Options{APIVersions: []string{"piraeus.io/v1"}, Set: []string{"aggregator.linstor.secretName=", "aggregator.linstor.url=http://linstor-controller.cozy-linstor.svc:3370"}})
	require.NoError(t, err)
	_, err = r.Object("Role", "cozy-health-aggregator-linstor-client")
	assert.ErrorIs(t, err, ErrNotFound, "no client certificate: nothing to read")
}

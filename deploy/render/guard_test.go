package render

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The drain guard is off by default: nothing of it renders.
func TestGuardOffByDefault(t *testing.T) {
	r, err := Render(Options{})
	require.NoError(t, err)
	_, err = r.Object("ValidatingWebhookConfiguration", "cozy-health-drain-guard")
	assert.Error(t, err)
	assert.NotContains(t, configYAML(t, r), "guard-addr")
}

// guard.enabled renders the webhook (failurePolicy Ignore, pods/eviction
// CREATE, the release namespace excluded), its ClusterIP Service, the
// aggregator's flags and port, and the serving certificate's SANs for the
// Service the apiserver calls.
func TestGuardEnabled(t *testing.T) {
	r, err := Render(Options{Set: []string{"guard.enabled=true"}})
	require.NoError(t, err)
	vwc, err := r.Object("ValidatingWebhookConfiguration", "cozy-health-drain-guard")
	require.NoError(t, err)
	hooks, _, _ := unstructured.NestedSlice(vwc.Object, "webhooks")
	require.Len(t, hooks, 1)
	h := hooks[0].(map[string]any)
	assert.Equal(t, "Ignore", h["failurePolicy"])
	assert.Equal(t, float64(3), h["timeoutSeconds"])
	assert.Equal(t, map[string]any{"name": "cozy-health-aggregator-guard", "namespace": "cozy-health", "port": float64(443), "path": "/v1/guard/eviction"},
		h["clientConfig"].(map[string]any)["service"])
	assert.Equal(t, []any{map[string]any{"apiGroups": []any{""}, "apiVersions": []any{"v1"}, "operations": []any{"CREATE"}, "resources": []any{"pods/eviction"}, "scope": "Namespaced"}}, h["rules"])
	assert.Equal(t, []any{map[string]any{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": []any{"cozy-health"}}},
		h["namespaceSelector"].(map[string]any)["matchExpressions"])

	svc, err := r.Object("Service", "cozy-health-aggregator-guard")
	require.NoError(t, err)
	assert.Empty(t, svc.Object["spec"].(map[string]any)["clusterIP"], "ClusterIP: the apiserver cannot call a headless Service")

	cfg := configYAML(t, r)
	for _, want := range []string{`guard-addr: ":9444"`, "guard-unknown-for: 5m", `guard-exempt-namespaces: "cozy-health"`,
		"guard-webhook-configuration: cozy-health-drain-guard", "tls-service: cozy-health-aggregator,cozy-health-aggregator-ingest,cozy-health-aggregator-guard"} {
		assert.Contains(t, cfg, want)
	}
	dep, err := r.Object("Deployment", "cozy-health-aggregator")
	require.NoError(t, err)
	containers, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	assert.Contains(t, containers[0].(map[string]any)["ports"], map[string]any{"name": "guard", "containerPort": float64(9444)})

	role, err := r.Object("ClusterRole", "cozy-health-aggregator-guard")
	require.NoError(t, err)
	rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
	assert.ElementsMatch(t, []any{
		map[string]any{"apiGroups": []any{""}, "resources": []any{"pods"}, "verbs": []any{"get"}},
		map[string]any{"apiGroups": []any{"admissionregistration.k8s.io"}, "resources": []any{"validatingwebhookconfigurations"}, "resourceNames": []any{"cozy-health-drain-guard"}, "verbs": []any{"get", "update"}},
	}, rules)

	// cert-manager mode: the Certificate carries the guard Service's names.
	r, err = Render(Options{Set: []string{"guard.enabled=true"}, APIVersions: certManagerAPI})
	require.NoError(t, err)
	cert, err := r.Object("Certificate", "cozy-health-aggregator")
	require.NoError(t, err)
	names, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	assert.Contains(t, names, "cozy-health-aggregator-guard.cozy-health.svc")
}

// The network policies admit the guard's port from where they admit the
// drain check's: the kube-apiserver calls the webhook from the nodes.
func TestGuardPortInNetworkPolicies(t *testing.T) {
	r, err := Render(Options{Set: []string{"guard.enabled=true", "networkPolicy.nodeCIDRs={10.0.0.0/8}"}})
	require.NoError(t, err)
	np, err := r.Object("NetworkPolicy", "cozy-health-aggregator")
	require.NoError(t, err)
	ingress, _, _ := unstructured.NestedSlice(np.Object, "spec", "ingress")
	assert.Contains(t, ingress[1].(map[string]any)["ports"], map[string]any{"port": "guard", "protocol": "TCP"})
	r, err = Render(Options{Set: []string{"guard.enabled=true"}, APIVersions: []string{"cilium.io/v2"}})
	require.NoError(t, err)
	cnp, err := r.Object("CiliumNetworkPolicy", "cozy-health-aggregator")
	require.NoError(t, err)
	ingress, _, _ = unstructured.NestedSlice(cnp.Object, "spec", "ingress")
	ports := ingress[0].(map[string]any)["toPorts"].([]any)[0].(map[string]any)["ports"]
	assert.Contains(t, ports, map[string]any{"port": "9444", "protocol": "TCP"})
}

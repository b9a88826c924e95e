package render

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestPeerSyncWiring: the replicas find each other through the -ingest
// Service (headless: every running replica's pod address) and authenticate
// with a projected token of the aggregator's own ServiceAccount for the
// agents' audience; the network policies admit the replicas' gRPC from each
// other. aggregator.peerSync.enabled=false renders none of it.
func TestPeerSyncWiring(t *testing.T) {
	r, err := Render(Options{Namespace: "cozy-health", Set: []string{"aggregator.tokenAudience=aud.example"}})
	require.NoError(t, err)
	dep, err := r.Object("Deployment", "cozy-health-aggregator")
	require.NoError(t, err)
	args := containerArgs(t, dep)
	assert.Contains(t, args, "--peers=cozy-health-aggregator-ingest.cozy-health.svc:9443")
	assert.Contains(t, args, "--peer-token-file=/var/run/secrets/tokens/cozy-health/token")
	assert.Contains(t, args, "--peer-service-account=cozy-health/cozy-health-aggregator")
	ingest, err := r.Object("Service", "cozy-health-aggregator-ingest")
	require.NoError(t, err)
	assert.Equal(t, "None", nested(t, ingest, "spec", "clusterIP"), "headless: the name resolves to every replica")
	vols, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "volumes")
	var sat map[string]any
	for _, v := range vols {
		if v.(map[string]any)["name"] == "token" {
			src, _, _ := unstructured.NestedSlice(v.(map[string]any), "projected", "sources")
			require.Len(t, src, 1)
			sat, _ = src[0].(map[string]any)["serviceAccountToken"].(map[string]any)
		}
	}
	require.NotNil(t, sat, "a projected token volume")
	assert.Equal(t, "aud.example", sat["audience"], "the agents' audience: the peers review it as theirs")
	assert.Equal(t, "token", sat["path"])
	assert.Contains(t, nested(t, dep, "spec", "template", "spec", "containers", 0, "volumeMounts"),
		map[string]any{"name": "token", "mountPath": "/var/run/secrets/tokens/cozy-health", "readOnly": true})
	assert.Equal(t, "cozy-health-aggregator", nested(t, dep, "spec", "template", "spec", "serviceAccountName"))

	cnpR, err := Render(Options{APIVersions: []string{"cilium.io/v2"}, Set: []string{"networkPolicy.nodeCIDRs={100.64.0.0/16}"}})
	require.NoError(t, err)
	cnp, err := cnpR.Object("CiliumNetworkPolicy", "cozy-health-aggregator")
	require.NoError(t, err)
	ingress := nested(t, cnp, "spec", "ingress").([]any)
	last := ingress[len(ingress)-1].(map[string]any)
	assert.Equal(t, []any{map[string]any{"matchLabels": map[string]any{"app.kubernetes.io/name": "cozy-health-aggregator"}}}, last["fromEndpoints"])
	assert.Equal(t, []any{map[string]any{"ports": []any{map[string]any{"port": "9443", "protocol": "TCP"}}}}, last["toPorts"])

	off, err := Render(Options{Set: []string{"aggregator.peerSync.enabled=false"}})
	require.NoError(t, err)
	dep, err = off.Object("Deployment", "cozy-health-aggregator")
	require.NoError(t, err)
	for _, a := range containerArgs(t, dep) {
		assert.NotContains(t, a, "--peer")
	}
	vols, _, _ = unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "volumes")
	assert.Len(t, vols, 1, "the config only")
	np, err := off.Object("NetworkPolicy", "cozy-health-aggregator")
	require.NoError(t, err)
	assert.Len(t, nested(t, np, "spec", "ingress"), 2)
}

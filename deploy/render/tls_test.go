package render

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// certManagerAPI is what a cluster with cert-manager serves.
var certManagerAPI = []string{"cert-manager.io/v1"}

func configYAML(t *testing.T, r *Release) string {
	t.Helper()
	cm, err := r.Object("ConfigMap", "cozy-health-aggregator")
	require.NoError(t, err)
	return cm.Object["data"].(map[string]any)["config.yaml"].(string)
}

func tlsRules(t *testing.T, r *Release) []any {
	t.Helper()
	role, err := r.Object("Role", "cozy-health-aggregator-tls")
	require.NoError(t, err)
	assert.Equal(t, "cozy-health", role.GetNamespace(), "the release namespace")
	rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
	return rules
}

func certManagerKinds(r *Release) []string {
	var out []string
	for _, m := range r.Manifests {
		if m.Kind == "Issuer" || m.Kind == "Certificate" {
			out = append(out, m.Kind+"/"+m.Name)
		}
	}
	return out
}

// Without cert-manager's API (and by default in `helm template`, and so in
// the plain manifests) the aggregator keeps its own CA.
func TestTLSSelfSignedWithoutCertManager(t *testing.T) {
	r, err := Render(Options{})
	require.NoError(t, err)
	assert.Empty(t, certManagerKinds(r))
	cfg := configYAML(t, r)
	for _, want := range []string{"tls-mode: self-signed", "tls-secret: cozy-health-aggregator-tls", "tls-ca-configmap: cozy-health-ca",
		"tls-owner-configmap: cozy-health-aggregator", "tls-service: cozy-health-aggregator", "tls-cluster-domain: cluster.local", "tls-ca-validity: 43800h", "tls-cert-validity: 2160h", "tls-ca-overlap: 24h"} {
		assert.Contains(t, cfg, want)
	}
	assert.ElementsMatch(t, []any{
		map[string]any{"apiGroups": []any{""}, "resources": []any{"secrets"}, "resourceNames": []any{"cozy-health-aggregator-tls"}, "verbs": []any{"get", "list", "watch", "update"}},
		map[string]any{"apiGroups": []any{""}, "resources": []any{"secrets"}, "verbs": []any{"create"}},
		map[string]any{"apiGroups": []any{""}, "resources": []any{"configmaps"}, "resourceNames": []any{"cozy-health-ca"}, "verbs": []any{"get", "patch"}},
		map[string]any{"apiGroups": []any{""}, "resources": []any{"configmaps"}, "resourceNames": []any{"cozy-health-aggregator"}, "verbs": []any{"get"}},
		map[string]any{"apiGroups": []any{""}, "resources": []any{"configmaps"}, "verbs": []any{"create"}},
	}, tlsRules(t, r))

	dep, err := r.Object("Deployment", "cozy-health-aggregator")
	require.NoError(t, err)
	for _, a := range containerArgs(t, dep) {
		assert.False(t, strings.HasPrefix(a, "--tls-cert") || strings.HasPrefix(a, "--tls-key"), "no certificate files: %s", a)
	}
	vols, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "volumes")
	for _, v := range vols {
		assert.NotContains(t, v, "secret", "no Secret volume a pod would wait for")
	}
	env, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	assert.Contains(t, env[0].(map[string]any)["env"], map[string]any{"name": "POD_NAMESPACE", "valueFrom": map[string]any{"fieldRef": map[string]any{"fieldPath": "metadata.namespace"}}})

	ds, err := r.Object("DaemonSet", "cozy-health-agent")
	require.NoError(t, err)
	assert.Contains(t, containerArgs(t, ds), "--ca-file=/etc/cozy-health/ca/ca.crt")
	vols, _, _ = unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "volumes")
	assert.Contains(t, vols, map[string]any{"name": "aggregator-ca", "configMap": map[string]any{"name": "cozy-health-ca",
		"items": []any{map[string]any{"key": "ca.crt", "path": "ca.crt"}}, "optional": true}})

	// Asked for explicitly, self-signed wins over a cert-manager that is there.
	r, err = Render(Options{APIVersions: certManagerAPI, Set: []string{"tls.mode=self-signed"}})
	require.NoError(t, err)
	assert.Empty(t, certManagerKinds(r))
	assert.Contains(t, configYAML(t, r), "tls-mode: self-signed")
}

// With cert-manager's API the chart issues the serving certificate through
// a CA of its own, into the same Secret; the aggregator only reads it.
func TestTLSCertManagerWhenServed(t *testing.T) {
	r, err := Render(Options{APIVersions: certManagerAPI, Set: []string{"tls.extraSANs={aggregator.example.org,10.0.0.7}"}})
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"Issuer/cozy-health-selfsigned", "Certificate/cozy-health-aggregator-ca", "Issuer/cozy-health-aggregator-ca",
		"Certificate/cozy-health-aggregator"}, certManagerKinds(r))

	selfSigned, err := r.Object("Issuer", "cozy-health-selfsigned")
	require.NoError(t, err)
	assert.Equal(t, map[string]any{}, nested(t, selfSigned, "spec", "selfSigned"))
	ca, err := r.Object("Certificate", "cozy-health-aggregator-ca")
	require.NoError(t, err)
	assert.Equal(t, true, nested(t, ca, "spec", "isCA"))
	assert.Equal(t, "cozy-health-selfsigned", nested(t, ca, "spec", "issuerRef", "name"))
	assert.Equal(t, "43800h", nested(t, ca, "spec", "duration"))
	caIssuer, err := r.Object("Issuer", "cozy-health-aggregator-ca")
	require.NoError(t, err)
	assert.Equal(t, nested(t, ca, "spec", "secretName"), nested(t, caIssuer, "spec", "ca", "secretName"), "the CA Issuer signs with the CA Certificate's Secret")

	srv, err := r.Object("Certificate", "cozy-health-aggregator")
	require.NoError(t, err)
	assert.Equal(t, "cozy-health-aggregator-tls", nested(t, srv, "spec", "secretName"), "the Secret the aggregator watches")
	assert.Equal(t, "cozy-health-aggregator-ca", nested(t, srv, "spec", "issuerRef", "name"))
	assert.Equal(t, "2160h", nested(t, srv, "spec", "duration"))
	assert.Equal(t, []any{"cozy-health-aggregator", "cozy-health-aggregator.cozy-health", "cozy-health-aggregator.cozy-health.svc",
		"cozy-health-aggregator.cozy-health.svc.cluster.local",
		"cozy-health-aggregator-ingest", "cozy-health-aggregator-ingest.cozy-health", "cozy-health-aggregator-ingest.cozy-health.svc",
		"cozy-health-aggregator-ingest.cozy-health.svc.cluster.local", "aggregator.example.org"}, nested(t, srv, "spec", "dnsNames"),
		"both Services' names: the agents dial the -ingest one")
	assert.Equal(t, []any{"10.0.0.7"}, nested(t, srv, "spec", "ipAddresses"))
	assert.Equal(t, []any{"server auth", "digital signature"}, nested(t, srv, "spec", "usages"))

	cfg := configYAML(t, r)
	assert.Contains(t, cfg, "tls-mode: secret")
	assert.Contains(t, cfg, "tls-secret: cozy-health-aggregator-tls")
	assert.Contains(t, cfg, "tls-ca-configmap: cozy-health-ca")
	assert.NotContains(t, cfg, "tls-ca-validity", "cert-manager decides the lifetimes")
	assert.ElementsMatch(t, []any{
		map[string]any{"apiGroups": []any{""}, "resources": []any{"secrets"}, "resourceNames": []any{"cozy-health-aggregator-tls"}, "verbs": []any{"get", "list", "watch"}},
		map[string]any{"apiGroups": []any{""}, "resources": []any{"configmaps"}, "resourceNames": []any{"cozy-health-ca"}, "verbs": []any{"get", "patch"}},
		map[string]any{"apiGroups": []any{""}, "resources": []any{"configmaps"}, "resourceNames": []any{"cozy-health-aggregator"}, "verbs": []any{"get"}},
		map[string]any{"apiGroups": []any{""}, "resources": []any{"configmaps"}, "verbs": []any{"create"}},
	}, tlsRules(t, r), "the aggregator never writes a Secret cert-manager owns")

	// Asked for explicitly, cert-manager objects render even where the
	// renderer was not told of the API (helm template without --api-versions).
	r, err = Render(Options{Set: []string{"tls.mode=cert-manager"}})
	require.NoError(t, err)
	assert.Len(t, certManagerKinds(r), 4)
}

func TestTLSValuesRejected(t *testing.T) {
	for _, c := range []struct {
		set, want string
	}{
		{"tls.mode=acme", "/tls/mode"},
		{"tls.caOverlap=20000h", "tls.caOverlap 20000h: must be under a third of tls.caDuration 43800h"},
		{"tls.duration=90 days", "/tls/duration"},
		{"tls.extraSANs={a b}", "/tls/extraSANs/0"},
	} {
		_, err := Render(Options{Set: []string{c.set}})
		require.Error(t, err, c.set)
		assert.Contains(t, err.Error(), c.want, c.set)
	}
}

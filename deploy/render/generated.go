package render

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"

	"sigs.k8s.io/yaml"

	"github.com/cozystack/cozy-health/deploy"
)

// Paths of the files `make manifests` writes besides deploy.ManifestsFile,
// relative to the repository root.
const (
	// TalosServiceAccountFile is the chart's talos.dev ServiceAccount alone,
	// for kubectl users to apply after the Talos patch (the plain manifests
	// leave it out: Talos refuses it before).
	TalosServiceAccountFile = "deploy/manifests/talos-serviceaccount.yaml"
	// LinstorRBACFile is the Role and RoleBinding on LINSTOR's client
	// Secret (in cozy-linstor) alone, for kubectl users on a cluster with
	// LINSTOR (the plain manifests leave them out: the namespace may not
	// exist).
	LinstorRBACFile = "deploy/manifests/linstor-rbac.yaml"
	// CozystackTalosComponentFile and CozystackLinstorComponentFile are the
	// templates of the Cozystack package's components cozy-health-talos and
	// cozy-health-linstor: the chart's API-gated objects rendered with their
	// API served, each its own release that Cozystack's operator retries
	// until the API arrives (deploy/cozystack/README.md).
	CozystackTalosComponentFile   = "deploy/cozystack/packages/system/cozy-health-talos/templates/serviceaccount.yaml"
	CozystackLinstorComponentFile = "deploy/cozystack/packages/system/cozy-health-linstor/templates/rbac.yaml"
	// CozystackDashboardFile is files/dashboard.json where Cozystack keeps
	// its infra dashboards (dashboards/<group>/<name>.json).
	CozystackDashboardFile = "deploy/cozystack/dashboards/cozy-health/cozy-health.json"
	// CozystackKSMFile is files/kube-state-metrics.yaml as the values
	// Cozystack's monitoring-agents package merges in (its inline
	// kube-state-metrics customResourceState config and RBAC).
	CozystackKSMFile = "deploy/cozystack/snippets/monitoring-agents-values.yaml"
)

// ManifestsOptions are the render options of the plain manifests: the
// chart's defaults plus the release Namespace.
var ManifestsOptions = Options{Set: []string{"namespace.create=true", "platformNamespaceCreate=false"}}

const manifestsHeader = `# cozy-health plain manifests, rendered from the Helm chart
# (deploy/charts/cozy-health) with its default values, namespace.create=true
# and platformNamespaceCreate=false by 'make manifests'. DO NOT EDIT: change the
# chart and run 'make manifests'.
#
#   kubectl create namespace cozy-system   # only where Cozystack is not installed
#   kubectl apply --server-side -f deploy/manifests/cozy-health.yaml
#
# cozy-system (platformNamespace) is not created here, so that deleting these
# manifests never deletes Cozystack's namespace.
# The Talos ServiceAccount is not here (Talos refuses it until the patch in
# talos/manifests is applied): apply deploy/manifests/talos-serviceaccount.yaml
# after the patch. Nor is the Role on LINSTOR's client Secret (its namespace,
# cozy-linstor, exists only with LINSTOR): there apply
# deploy/manifests/linstor-rbac.yaml.
`

const linstorHeader = `# cozy-health's Role and RoleBinding on the LINSTOR API client Secret
# (cozy-linstor/linstor-client-tls), rendered from the Helm chart by
# 'make manifests'. DO NOT EDIT. Apply it on a cluster with LINSTOR:
#
#   kubectl apply --server-side -f deploy/manifests/linstor-rbac.yaml
`

const talosHeader = `# cozy-health's talos.dev/v1alpha1 ServiceAccount, rendered from the Helm chart
# by 'make manifests'. DO NOT EDIT. Apply it once the Talos API access patch
# (talos/manifests/talos-api-access-patch.yaml) is on the control-plane nodes:
#
#   kubectl apply --server-side -f deploy/manifests/talos-serviceaccount.yaml
`

const componentHeader = `# Rendered from cozy-health's chart (deploy/charts/cozy-health, release
# cozy-health in cozy-health) with its API served, by 'make manifests'. DO NOT
# EDIT. Not gated: until the cluster serves what it needs the install fails,
# and Cozystack's operator retries it (install strategy RetryOnFailure).
`

const ksmHeader = `# cozy-health's entry for Cozystack's monitoring-agents values
# (packages/system/monitoring-agents/values.yaml): append the rule to
# kube-state-metrics.rbac.extraRules and the resource to
# kube-state-metrics.customResourceState.config.spec.resources (Helm replaces
# lists, it does not merge them). Generated from the chart's
# files/kube-state-metrics.yaml by 'make manifests'. DO NOT EDIT.
`

// GeneratedFiles renders every file `make manifests` writes, by path
// relative to the repository root.
func GeneratedFiles() (map[string][]byte, error) {
	out := map[string][]byte{}
	r, err := Render(ManifestsOptions)
	if err != nil {
		return nil, err
	}
	out[deploy.ManifestsFile] = append([]byte(manifestsHeader), r.YAML()...)

	t, err := Render(Options{APIVersions: []string{"talos.dev/v1alpha1"}})
	if err != nil {
		return nil, err
	}
	var sa *Manifest
	for i, m := range t.Manifests {
		if m.Kind == "ServiceAccount" && m.Source == "templates/talos-serviceaccount.yaml" {
			sa = &t.Manifests[i]
		}
	}
	if sa == nil {
		return nil, fmt.Errorf("the chart rendered no talos.dev ServiceAccount with talos.dev/v1alpha1 served")
	}
	out[TalosServiceAccountFile] = fmt.Appendf([]byte(talosHeader), "---\n%s\n", sa.Content)
	out[CozystackTalosComponentFile] = fmt.Appendf([]byte(componentHeader), "%s\n", sa.Content)

	l, err := Render(Options{APIVersions: []string{"piraeus.io/v1"}})
	if err != nil {
		return nil, err
	}
	linstor := []byte(linstorHeader)
	for _, m := range l.Manifests {
		if m.Source == "templates/linstor-rbac.yaml" {
			linstor = fmt.Appendf(linstor, "---\n%s\n", m.Content)
		}
	}
	if len(linstor) == len(linstorHeader) {
		return nil, fmt.Errorf("the chart rendered no LINSTOR client Role with piraeus.io/v1 served")
	}
	out[LinstorRBACFile] = linstor
	// No document before the first object: a comment-only one has no kind.
	out[CozystackLinstorComponentFile] = append([]byte(componentHeader), bytes.TrimPrefix(linstor[len(linstorHeader):], []byte("---\n"))...)

	dash, err := fs.ReadFile(deploy.Chart(), "files/dashboard.json")
	if err != nil {
		return nil, err
	}
	if !json.Valid(dash) {
		return nil, fmt.Errorf("files/dashboard.json is not JSON")
	}
	out[CozystackDashboardFile] = dash

	raw, err := fs.ReadFile(deploy.Chart(), "files/kube-state-metrics.yaml")
	if err != nil {
		return nil, err
	}
	var entry map[string]any
	if err := yaml.Unmarshal(raw, &entry); err != nil {
		return nil, fmt.Errorf("decode files/kube-state-metrics.yaml: %w", err)
	}
	ksm := map[string]any{"kube-state-metrics": map[string]any{
		"rbac": map[string]any{"extraRules": []any{map[string]any{
			"apiGroups": []any{"health.cozystack.io"}, "resources": []any{"healths"}, "verbs": []any{"list", "watch"},
		}}},
		"customResourceState": map[string]any{"enabled": true, "config": map[string]any{"spec": map[string]any{"resources": []any{entry}}}},
	}}
	b, err := yaml.Marshal(ksm)
	if err != nil {
		return nil, err
	}
	out[CozystackKSMFile] = append([]byte(ksmHeader), b...)
	return out, nil
}

package manifests

import (
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/role"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/cozy-health/deploy"
)

// shipped returns the rendered plain manifests' object of apiVersion/kind.
func shipped(t *testing.T, apiVersion, kind string) map[string]any {
	t.Helper()
	all := string(deploy.Manifests()) + "\n---\n" + string(deploy.TalosServiceAccount())
	for _, doc := range strings.Split(all, "\n---") {
		var obj map[string]any
		require.NoError(t, yaml.Unmarshal([]byte(doc), &obj))
		if obj["apiVersion"] == apiVersion && obj["kind"] == kind {
			return obj
		}
	}
	t.Fatalf("the chart renders no %s %s", apiVersion, kind)
	return nil
}

// The roles of the patch and of the chart's Talos ServiceAccount must be
// real Talos roles, read-only, and the same set (the ServiceAccount may only
// ask for allowed roles), for the namespace the chart installs into.
func TestRolesAreRealAndReadOnly(t *testing.T) {
	var patch struct {
		Machine struct {
			Features struct {
				Access struct {
					Enabled    bool     `json:"enabled"`
					Roles      []string `json:"allowedRoles"`
					Namespaces []string `json:"allowedKubernetesNamespaces"`
				} `json:"kubernetesTalosAPIAccess"`
			} `json:"features"`
		} `json:"machine"`
	}
	b, err := os.ReadFile("talos-api-access-patch.yaml")
	require.NoError(t, err)
	require.NoError(t, yaml.UnmarshalStrict(b, &patch))
	access := patch.Machine.Features.Access
	assert.True(t, access.Enabled)
	assert.Equal(t, []string{"cozy-health"}, access.Namespaces)

	sa := shipped(t, "talos.dev/v1alpha1", "ServiceAccount")
	meta := sa["metadata"].(map[string]any)
	assert.Contains(t, access.Namespaces, meta["namespace"], "the patch allows the chart's namespace")
	var saRoles []string
	for _, r := range sa["spec"].(map[string]any)["roles"].([]any) {
		saRoles = append(saRoles, r.(string))
	}

	for _, roles := range [][]string{access.Roles, saRoles} {
		set, unknown := role.Parse(roles)
		require.Empty(t, unknown, "unknown Talos roles")
		assert.True(t, set.Includes(role.Reader))
		for _, forbidden := range []role.Role{role.Admin, role.Operator, role.EtcdBackup, role.MetaWriter, role.Impersonator} {
			assert.False(t, set.Includes(forbidden), "%s is not read-only", forbidden)
		}
	}
	assert.ElementsMatch(t, access.Roles, saRoles)
}

// etcd listens for metrics where the chart's agent reads them: plain HTTP on
// the node's loopback.
func TestEtcdMetricsWhereTheAgentReads(t *testing.T) {
	var patch struct {
		Cluster struct {
			Etcd struct {
				ExtraArgs map[string]string `json:"extraArgs"`
			} `json:"etcd"`
		} `json:"cluster"`
	}
	b, err := os.ReadFile("etcd-metrics-patch.yaml")
	require.NoError(t, err)
	require.NoError(t, yaml.UnmarshalStrict(b, &patch))
	listen, err := url.Parse(patch.Cluster.Etcd.ExtraArgs["listen-metrics-urls"])
	require.NoError(t, err)
	assert.Equal(t, "http", listen.Scheme)
	assert.Equal(t, "127.0.0.1", listen.Hostname())

	ds := shipped(t, "apps/v1", "DaemonSet")
	c := ds["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
	var agentURL string
	for _, a := range c["args"].([]any) {
		if v, ok := strings.CutPrefix(a.(string), "--etcd-metrics-url="); ok {
			agentURL = v
		}
	}
	got, err := url.Parse(agentURL)
	require.NoError(t, err)
	assert.Equal(t, listen.Host, got.Host, "the agent reads etcd's metrics where the patch makes etcd serve them")
	assert.Equal(t, "/metrics", got.Path)
}

// The etcd metrics patch listens where the agent reads by default, and is
// the patch the agent's Unknown reason names.
func TestEtcdMetricsPatch(t *testing.T) {
	var patch struct {
		Cluster struct {
			Etcd struct {
				ExtraArgs map[string]string `json:"extraArgs"`
			} `json:"etcd"`
		} `json:"cluster"`
	}
	b, err := os.ReadFile("etcd-metrics-patch.yaml")
	require.NoError(t, err)
	require.NoError(t, yaml.UnmarshalStrict(b, &patch))
	assert.Equal(t, map[string]string{"listen-metrics-urls": "http://127.0.0.1:2381"}, patch.Cluster.Etcd.ExtraArgs)
}

package manifests

import (
	"os"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/role"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// The roles in both manifests must be real Talos roles, read-only, and the
// same set (the ServiceAccount may only ask for allowed roles).
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
	b, err := os.ReadFile("machineconfig-patch.yaml")
	require.NoError(t, err)
	require.NoError(t, yaml.UnmarshalStrict(b, &patch))
	access := patch.Machine.Features.Access
	assert.True(t, access.Enabled)
	assert.Equal(t, []string{"cozy-health"}, access.Namespaces)

	var sa struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
		Spec struct {
			Roles []string `json:"roles"`
		} `json:"spec"`
	}
	b, err = os.ReadFile("serviceaccount.yaml")
	require.NoError(t, err)
	require.NoError(t, yaml.UnmarshalStrict(b, &sa))
	assert.Equal(t, "talos.dev/v1alpha1", sa.APIVersion)
	assert.Equal(t, "ServiceAccount", sa.Kind)
	assert.Contains(t, access.Namespaces, sa.Metadata.Namespace)

	for _, roles := range [][]string{access.Roles, sa.Spec.Roles} {
		set, unknown := role.Parse(roles)
		require.Empty(t, unknown, "unknown Talos roles")
		assert.True(t, set.Includes(role.Reader))
		for _, forbidden := range []role.Role{role.Admin, role.Operator, role.EtcdBackup, role.MetaWriter, role.Impersonator} {
			assert.False(t, set.Includes(forbidden), "%s is not read-only", forbidden)
		}
	}
	assert.ElementsMatch(t, access.Roles, sa.Spec.Roles)
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

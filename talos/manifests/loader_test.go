package manifests

import (
	"os"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// metal is the runtime mode of a Talos node installed on a machine.
type metal struct{}

func (metal) String() string        { return "metal" }
func (metal) RequiresInstall() bool { return true }
func (metal) InContainer() bool     { return false }

// controlPlane generates a v1.13 control-plane machine config with Talos'
// own generator, as `talosctl gen config` (and talm's templates) start from.
func controlPlane(t *testing.T, typ machine.Type) []byte {
	t.Helper()
	in, err := generate.NewInput("cozy", "https://192.0.2.1:6443", "1.37.2", generate.WithVersionContract(config.TalosVersion1_13), generate.WithInstallDisk("/dev/sda"))
	require.NoError(t, err)
	cfg, err := in.Config(typ)
	require.NoError(t, err)
	b, err := cfg.Bytes()
	require.NoError(t, err)
	return b
}

// patched applies patch files to cfg with Talos' config patcher (what
// `talosctl patch machineconfig` and talm's node-file body use) and
// validates the result as a node does before accepting it.
func patched(t *testing.T, cfg []byte, files ...string) config.Provider {
	t.Helper()
	var args []string
	for _, f := range files {
		args = append(args, "@"+f)
	}
	patches, err := configpatcher.LoadPatches(args)
	require.NoError(t, err)
	out, err := configpatcher.Apply(configpatcher.WithBytes(cfg), patches)
	require.NoError(t, err)
	b, err := out.Bytes()
	require.NoError(t, err)
	got, err := configloader.NewFromBytes(b)
	require.NoError(t, err, "Talos' loader reads the patched config")
	warnings, err := got.Validate(metal{})
	require.NoError(t, err, "Talos validates the patched config")
	t.Logf("%v: validation warnings %v", files, warnings)
	return got
}

// The patches, applied by Talos' own patcher to a Talos-generated v1.13
// control-plane config, load and validate, and give the API access and the
// etcd flag the agent needs; the talm body gives exactly the same config.
func TestPatchesLoadWithTalosMachinery(t *testing.T) {
	cp := controlPlane(t, machine.TypeControlPlane)
	both := patched(t, cp, "talos-api-access-patch.yaml", "etcd-metrics-patch.yaml")
	access := both.Machine().Features().KubernetesTalosAPIAccess()
	assert.True(t, access.Enabled())
	assert.Equal(t, []string{"os:reader"}, access.AllowedRoles())
	assert.Equal(t, []string{"cozy-health"}, access.AllowedKubernetesNamespaces())
	assert.Equal(t, []string{"http://127.0.0.1:2381"}, both.Cluster().Etcd().ExtraArgs()["listen-metrics-urls"])

	talm := patched(t, cp, "talm-controlplane-body.yaml")
	wantB, err := both.Bytes()
	require.NoError(t, err)
	gotB, err := talm.Bytes()
	require.NoError(t, err)
	var want, got any
	require.NoError(t, yaml.Unmarshal(wantB, &want))
	require.NoError(t, yaml.Unmarshal(gotB, &got))
	assert.Equal(t, want, got, "the talm body is the two patches")

	// A body that already carries talm's preset etcd argument keeps it.
	preset := patched(t, cp, "testdata/talm-preset-etcd.yaml", "talm-controlplane-body.yaml")
	assert.Equal(t, []string{"8589934592"}, preset.Cluster().Etcd().ExtraArgs()["quota-backend-bytes"])
	assert.Equal(t, []string{"http://127.0.0.1:2381"}, preset.Cluster().Etcd().ExtraArgs()["listen-metrics-urls"])

	// The validation is Talos' own: a role it does not have is refused.
	patches, err := configpatcher.LoadPatches([]string{"@testdata/unknown-role.yaml"})
	require.NoError(t, err)
	out, err := configpatcher.Apply(configpatcher.WithBytes(cp), patches)
	require.NoError(t, err)
	bad, err := out.Config()
	require.NoError(t, err)
	_, err = bad.Validate(metal{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `invalid role "os:etcd:reader"`)
}

// The Talos >= 1.14 document names the same roles and namespace as the
// v1alpha1 patch. The module proxy reachable here serves
// github.com/siderolabs/talos/pkg/machinery up to v1.14.0-alpha.2, and the
// kind arrived in v1.14.0-beta.1, so its loader cannot be run on it here;
// what the v1.13 loader (go.mod's) says is a fact an operator needs: a
// v1.13 node refuses the document.
func TestKubeTalosAPIAccessConfigForTalos114(t *testing.T) {
	b, err := os.ReadFile("kube-talos-api-access-config.yaml")
	require.NoError(t, err)
	var doc struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Roles      []string `json:"allowedRoles"`
		Namespaces []string `json:"allowedKubernetesNamespaces"`
	}
	require.NoError(t, yaml.UnmarshalStrict(b, &doc))
	assert.Equal(t, "v1alpha1", doc.APIVersion)
	assert.Equal(t, "KubeTalosAPIAccessConfig", doc.Kind)

	p, err := os.ReadFile("talos-api-access-patch.yaml")
	require.NoError(t, err)
	var patch struct {
		Machine struct {
			Features struct {
				Access struct {
					Roles      []string `json:"allowedRoles"`
					Namespaces []string `json:"allowedKubernetesNamespaces"`
				} `json:"kubernetesTalosAPIAccess"`
			} `json:"features"`
		} `json:"machine"`
	}
	require.NoError(t, yaml.Unmarshal(p, &patch))
	assert.Equal(t, patch.Machine.Features.Access.Roles, doc.Roles)
	assert.Equal(t, patch.Machine.Features.Access.Namespaces, doc.Namespaces)

	_, err = configloader.NewFromBytes(b)
	require.Error(t, err, "Talos v1.13's loader does not know KubeTalosAPIAccessConfig")
	assert.Contains(t, err.Error(), "KubeTalosAPIAccessConfig")
}

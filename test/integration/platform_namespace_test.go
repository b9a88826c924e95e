package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cozystack/cozy-health/test/harness"
	"github.com/cozystack/cozy-health/test/lab"
)

// TestInstallWithoutPlatformNamespace: `helm install` (the Helm SDK) on a
// cluster without Cozystack's cozy-system. Told not to create it, the chart
// refuses before anything is applied and names the namespace; by default it
// creates it, keeps it across upgrades and leaves it on uninstall; an
// existing cozy-system that is not the release's (Cozystack's) is left out
// of the release. The release lives in a namespace other than cozy-health,
// and the NOTES' kubectl commands, run as printed with the real kubectl,
// work against that namespace.
func TestInstallWithoutPlatformNamespace(t *testing.T) {
	ctx := context.Background()
	cp := harness.StartWith(t, harness.Options{TalosPodSecurity: true})
	cs := cp.Clientset()
	const ns = "health-x"
	createNamespace(t, cs, ns, map[string]string{"pod-security.kubernetes.io/enforce": "privileged"})
	helm := func() *lab.Helm {
		h, err := lab.NewHelm(cp.Kubeconfig, "hx", ns)
		require.NoError(t, err)
		return h
	}
	platformNS := func() (map[string]string, error) {
		n, err := cs.CoreV1().Namespaces().Get(ctx, "cozy-system", metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return n.Annotations, nil
	}

	_, err := helm().Install(ctx, map[string]any{"platformNamespaceCreate": false})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "namespace cozy-system (platformNamespace) does not exist")
	assert.Contains(t, err.Error(), "kubectl create namespace cozy-system")
	ds, err := cs.AppsV1().DaemonSets(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	assert.Empty(t, ds.Items, "nothing applied before the check")
	_, err = platformNS()
	require.True(t, apierrors.IsNotFound(err), "%v", err)

	rel, err := helm().Install(ctx, nil)
	require.NoError(t, err, "installed on a cluster without cozy-system")
	ann, err := platformNS()
	require.NoError(t, err, "the chart created cozy-system")
	assert.Equal(t, "keep", ann["helm.sh/resource-policy"])
	_, err = cs.RbacV1().Roles("cozy-system").Get(ctx, "cozy-health-aggregator", metav1.GetOptions{})
	require.NoError(t, err, "the aggregator's Role in cozy-system")

	// NOTES: every command names the release namespace; the ones that do
	// not wait for running pods are run as printed (a shell, the real
	// kubectl on PATH).
	var cmds []string
	for _, l := range strings.Split(rel.Info.Notes, "\n") {
		if c, ok := strings.CutPrefix(l, "  "); ok && (strings.HasPrefix(c, "kubectl ") || strings.HasPrefix(c, "helm ") || strings.HasPrefix(c, "talosctl ")) {
			cmds = append(cmds, c)
		}
	}
	require.NotEmpty(t, cmds, rel.Info.Notes)
	assert.NotContains(t, rel.Info.Notes, "-n cozy-health", "no command names a namespace other than the release's")
	ran := 0
	for _, c := range cmds {
		if !strings.Contains(c, "get chz -A") && !strings.Contains(c, "-n cozy-system") && !strings.HasPrefix(c, "talosctl ") {
			assert.Contains(t, c, ns, "%q names the release namespace", c)
		}
		// Not run: what waits for running pods (no kubelet here), the
		// plugin, the talosconfig Secret Talos would issue and the CA
		// ConfigMap a running aggregator publishes.
		if !strings.HasPrefix(c, "kubectl ") || strings.Contains(c, "rollout status") || strings.HasPrefix(c, "kubectl health") || strings.Contains(c, "get secret") || strings.Contains(c, "get configmap") {
			continue
		}
		sh := exec.CommandContext(ctx, "sh", "-c", c)
		sh.Env = append(os.Environ(), "KUBECONFIG="+cp.Kubeconfig, "PATH="+filepath.Dir(cp.Binary("kubectl"))+":"+os.Getenv("PATH"))
		out, err := sh.CombinedOutput()
		require.NoError(t, err, "%s: %s", c, out)
		if strings.Contains(c, "get namespace") {
			assert.Equal(t, "privileged\n", string(out), c)
		}
		ran++
	}
	assert.GreaterOrEqual(t, ran, 4, "commands run: %v", cmds)
	assert.Contains(t, rel.Info.Notes, "allowedKubernetesNamespaces: ["+ns+"]", "the Talos patch must name this namespace, not cozy-health")

	rel, err = helm().Upgrade(ctx, nil)
	require.NoError(t, err)
	assert.Contains(t, rel.Manifest, "kind: Namespace\nmetadata:\n  name: cozy-system", "the release keeps the namespace it created")
	_, err = platformNS()
	require.NoError(t, err, "not deleted by the upgrade")

	require.NoError(t, helm().Uninstall())
	_, err = platformNS()
	require.NoError(t, err, "kept on uninstall (helm.sh/resource-policy: keep)")

	// cozy-system as Cozystack has it (no Helm ownership of this release):
	// not part of the release, and the install succeeds beside it.
	patch := []byte(`{"metadata":{"annotations":{"meta.helm.sh/release-name":null,"meta.helm.sh/release-namespace":null,"helm.sh/resource-policy":null},"labels":null}}`)
	_, err = cs.CoreV1().Namespaces().Patch(ctx, "cozy-system", types.MergePatchType, patch, metav1.PatchOptions{})
	require.NoError(t, err)
	rel, err = helm().Install(ctx, nil)
	require.NoError(t, err)
	assert.NotContains(t, rel.Manifest, "name: cozy-system\n  labels", "an existing cozy-system that is not the release's is not rendered")
	assert.NotContains(t, rel.Manifest, "helm.sh/resource-policy: keep")
}

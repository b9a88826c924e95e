package integration

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"

	"github.com/cozystack/cozy-health/deploy/render"
)

// TestChartCertManagerObjects: on a cluster serving cert-manager.io/v1 (its
// real CRDs installed), the chart's Issuer/Certificate chain passes
// cert-manager's own schema through server-side apply, with the rest of the
// release; auto mode detects the API from the cluster's discovery as Helm
// does at install time.
func TestChartCertManagerObjects(t *testing.T) {
	ctx := context.Background()
	cp := chartPlane(t)
	require.NoError(t, cp.InstallCertManagerCRDs(ctx))
	dc, err := discovery.NewDiscoveryClientForConfig(cp.Config)
	require.NoError(t, err)
	groups, err := discovery.ServerPreferredResources(dc)
	require.NoError(t, err)
	var apis []string
	for _, g := range groups {
		apis = append(apis, g.GroupVersion)
	}
	require.Contains(t, apis, "cert-manager.io/v1")

	r, err := render.Render(render.Options{Namespace: "cm", APIVersions: apis, Set: []string{"namespace.create=true", "tls.extraSANs={agg.example.org,10.0.0.7}"}})
	require.NoError(t, err)
	a := newApplier(t, cp.Config)
	objs, err := r.Objects()
	require.NoError(t, err)
	kinds := map[string]int{}
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			require.NoError(t, a.apply(ctx, o, false))
		}
	}
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			continue
		}
		kinds[o.GetKind()]++
		assert.NoError(t, a.apply(ctx, o, true), "%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
	}
	assert.Equal(t, 2, kinds["Issuer"])
	assert.Equal(t, 2, kinds["Certificate"])

	// cert-manager's schema is real: a Certificate without issuerRef is refused.
	for _, o := range objs {
		if o.GetKind() == "Certificate" {
			bad := o.DeepCopy()
			delete(bad.Object["spec"].(map[string]any), "issuerRef")
			assert.Error(t, a.apply(ctx, bad, true), "the CRD's schema is enforced")
			break
		}
	}

	// The agent's pod is still admitted: the CA ConfigMap mount is optional.
	pod := podFrom(t, r, "DaemonSet", "cozy-health-agent", "cm")
	_, err = cp.Clientset().CoreV1().Pods("cm").Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	assert.NoError(t, err)
}

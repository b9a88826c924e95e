package integration

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/cozystack/cozy-health/deploy"
	healthv1alpha1 "github.com/cozystack/cozy-health/pkg/apis/health/v1alpha1"
	ac "github.com/cozystack/cozy-health/pkg/applyconfiguration/health/v1alpha1"
	"github.com/cozystack/cozy-health/pkg/client/clientset/versioned"
	"github.com/cozystack/cozy-health/test/harness"
)

// apiAudience is the apiserver's own audience (its --service-account-issuer):
// tokens the pods use to talk to the API carry it.
const apiAudience = "https://kubernetes.default.svc.cluster.local"

// saConfig returns a client config authenticating with a real pod-bound
// ServiceAccount token, as a pod of that ServiceAccount on node would.
func saConfig(t *testing.T, cp *harness.ControlPlane, node, ns, sa string) *rest.Config {
	t.Helper()
	ctx := context.Background()
	pod := sa + "-" + node
	_, err := cp.CreateNodeAndPod(ctx, node, ns, pod, sa)
	require.NoError(t, err)
	tok, err := cp.PodBoundToken(ctx, ns, sa, pod, []string{apiAudience}, time.Hour)
	require.NoError(t, err)
	cfg := rest.AnonymousClientConfig(cp.Config)
	cfg.BearerToken = tok
	return cfg
}

// TestShippedRBAC applies the shipped plain manifests (rendered from the
// chart) with kubectl, as a kubectl user would, and proves the trust rules of
// DESIGN.md on the real authorizer: only the aggregator's ServiceAccount
// writes Health objects; agents may only get Nodes (their own control-plane
// label).
func TestShippedRBAC(t *testing.T) {
	ctx := context.Background()
	cp, _ := setup(t)
	require.NoError(t, cp.InstallTalosServiceAccountCRD(ctx))
	// Where Cozystack runs LINSTOR: the manifests' Role on its client
	// certificate Secret lives there.
	require.NoError(t, cp.EnsureNamespace(ctx, "cozy-linstor"))
	f := filepath.Join(harness.RepoRoot(), deploy.ManifestsFile)
	out, err := cp.Kubectl(ctx, "apply", "--server-side", "-f", f)
	require.NoError(t, err, "apply %s: %s", f, out)
	t.Logf("%s: %s", f, out)

	agg, err := versioned.NewForConfig(saConfig(t, cp, "node-1", "cozy-health", "cozy-health-aggregator"))
	require.NoError(t, err)
	agent, err := versioned.NewForConfig(saConfig(t, cp, "node-1", "cozy-health", "cozy-health-agent"))
	require.NoError(t, err)
	apply := metav1.ApplyOptions{FieldManager: fieldManager, Force: true}

	// The aggregator creates the object and applies its status.
	require.Eventually(t, func() bool { // bindings reach the authorizer's cache asynchronously
		_, err := agg.HealthV1alpha1().Healths("cozy-system").Apply(ctx, ac.Health("etcd", "cozy-system").WithSpec(ac.HealthSpec().WithComponent("etcd")), apply)
		return err == nil
	}, 10*time.Second, 100*time.Millisecond)
	_, err = agg.HealthV1alpha1().Healths("cozy-system").ApplyStatus(ctx,
		ac.Health("etcd", "cozy-system").WithStatus(ac.HealthStatus().WithOverall(healthv1alpha1.StatusHealthy)), apply)
	require.NoError(t, err)

	// The aggregator reviews tokens and watches Nodes, and holds its Lease.
	aggCore, err := kubernetes.NewForConfig(saConfig(t, cp, "node-2", "cozy-health", "cozy-health-aggregator"))
	require.NoError(t, err)
	_, err = aggCore.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: "x"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = aggCore.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)

	// The aggregator writes Health objects into tenant namespaces (the
	// cluster adapters' scopes) and nothing else there.
	_, err = agg.HealthV1alpha1().Healths("tenant-foo").Apply(ctx, ac.Health("backups", "tenant-foo").WithSpec(ac.HealthSpec().WithComponent("backups")), apply)
	assert.NoError(t, err, "aggregator in tenant-foo")
	_, err = aggCore.CoreV1().ConfigMaps("tenant-foo").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
	assert.True(t, apierrors.IsForbidden(err), "aggregator creates a ConfigMap in tenant-foo: %v", err)
	_, err = aggCore.CoreV1().Secrets("tenant-foo").List(ctx, metav1.ListOptions{})
	assert.True(t, apierrors.IsForbidden(err), "aggregator lists Secrets: %v", err)

	// The agent may get a Node (its own role label) and nothing more.
	agentCore, err := kubernetes.NewForConfig(saConfig(t, cp, "node-3", "cozy-health", "cozy-health-agent"))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := agentCore.CoreV1().Nodes().Get(ctx, "node-3", metav1.GetOptions{})
		return err == nil
	}, 10*time.Second, 100*time.Millisecond, "agent gets its Node")
	_, err = agentCore.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	assert.True(t, apierrors.IsForbidden(err), "agent lists Nodes: %v", err)

	// The agent can neither write nor even read them.
	_, err = agent.HealthV1alpha1().Healths("cozy-system").ApplyStatus(ctx,
		ac.Health("etcd", "cozy-system").WithStatus(ac.HealthStatus().WithOverall(healthv1alpha1.StatusDown)), apply)
	assert.True(t, apierrors.IsForbidden(err), "agent status write: %v", err)
	_, err = agent.HealthV1alpha1().Healths("cozy-system").Apply(ctx, ac.Health("cilium", "cozy-system").WithSpec(ac.HealthSpec().WithComponent("cilium")), apply)
	assert.True(t, apierrors.IsForbidden(err), "agent create: %v", err)
	_, err = agent.HealthV1alpha1().Healths("cozy-system").Get(ctx, "etcd", metav1.GetOptions{})
	assert.True(t, apierrors.IsForbidden(err), "agent read: %v", err)

	got, err := agg.HealthV1alpha1().Healths("cozy-system").Get(ctx, "etcd", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, healthv1alpha1.StatusHealthy, got.Status.Overall, "nothing the agent tried changed the object")
}

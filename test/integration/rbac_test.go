package integration

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"

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
	cp, admin := setup(t)
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

	aggregatorLease(ctx, t, cp, aggCore)

	// It reads the kubelets' Leases (AgentSilent / NodeUnreachable) and
	// can write none of them.
	_, err = aggCore.CoordinationV1().Leases("kube-node-lease").List(ctx, metav1.ListOptions{})
	assert.NoError(t, err, "aggregator lists kubelet Leases")
	_, err = aggCore.CoordinationV1().Leases("kube-node-lease").Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "node-9"}}, metav1.CreateOptions{})
	assert.True(t, apierrors.IsForbidden(err), "aggregator creates a kubelet Lease: %v", err)

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

	got, err := admin.HealthV1alpha1().Healths("cozy-system").Get(ctx, "etcd", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, healthv1alpha1.StatusHealthy, got.Status.Overall, "nothing the agent tried changed the object")
}

// aggregatorLease proves, with the aggregator's own pod-bound token, that
// it wins the election on its Lease with client-go's leaselock (what
// aggregator/internal/leader runs: get, create, update, and update again to
// release) and can update no other Lease in cozy-system: another
// controller's leader election there is out of its reach.
func aggregatorLease(ctx context.Context, t *testing.T, cp *harness.ControlPlane, agg kubernetes.Interface) {
	t.Helper()
	const ns, own, other = "cozy-system", "cozy-health-aggregator", "other-controller"
	admin, err := kubernetes.NewForConfig(cp.Config)
	require.NoError(t, err)
	_, err = admin.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: other},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("someone-else")},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	// What the authorizer answers for each verb on each name.
	allowed := func(verb, name string) bool {
		t.Helper()
		r, err := admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   "system:serviceaccount:cozy-health:" + own,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:cozy-health", "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: ns, Verb: verb, Group: "coordination.k8s.io", Resource: "leases", Name: name,
			},
		}}, metav1.CreateOptions{})
		require.NoError(t, err)
		return r.Status.Allowed
	}
	require.Eventually(t, func() bool { return allowed("update", own) }, 10*time.Second, 100*time.Millisecond, "update its own Lease")
	assert.True(t, allowed("get", own), "get its own Lease")
	assert.True(t, allowed("create", ""), "create a Lease (create names no object: no resourceNames)")
	for _, verb := range []string{"get", "update", "patch", "delete"} {
		assert.False(t, allowed(verb, other), "%s another Lease in %s", verb, ns)
	}
	for _, verb := range []string{"list", "watch", "deletecollection"} {
		assert.False(t, allowed(verb, ""), "%s Leases in %s", verb, ns)
	}

	// The real thing: client-go's election wins, renews and releases its
	// Lease with these rules alone.
	lec := leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: ns, Name: own},
			Client:     agg.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: "aggregator-0"},
		},
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond,
		ReleaseOnCancel: true, Name: own,
	}
	leading := make(chan struct{})
	ectx, stop := context.WithCancel(ctx)
	lec.Callbacks = leaderelection.LeaderCallbacks{
		OnStartedLeading: func(context.Context) { close(leading) },
		OnStoppedLeading: func() {},
	}
	le, err := leaderelection.NewLeaderElector(lec)
	require.NoError(t, err)
	done := make(chan struct{})
	go func() { defer close(done); le.Run(ectx) }()
	select {
	case <-leading:
	case <-time.After(30 * time.Second):
		stop()
		<-done
		t.Fatal("the aggregator's ServiceAccount did not win its own Lease")
	}
	time.Sleep(3 * lec.RetryPeriod) // renewals: get + update
	stop()
	<-done
	l, err := admin.CoordinationV1().Leases(ns).Get(ctx, own, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Empty(t, ptr.Deref(l.Spec.HolderIdentity, ""), "released on cancel (an update)")

	// Another controller's Lease: neither taken over nor read.
	_, err = agg.CoordinationV1().Leases(ns).Update(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: other},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("aggregator-0")},
	}, metav1.UpdateOptions{})
	assert.True(t, apierrors.IsForbidden(err), "aggregator updates Lease %s/%s: %v", ns, other, err)
	_, err = agg.CoordinationV1().Leases(ns).Get(ctx, other, metav1.GetOptions{})
	assert.True(t, apierrors.IsForbidden(err), "aggregator gets Lease %s/%s: %v", ns, other, err)
	l, err = admin.CoordinationV1().Leases(ns).Get(ctx, other, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "someone-else", ptr.Deref(l.Spec.HolderIdentity, ""))
}

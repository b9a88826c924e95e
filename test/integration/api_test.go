package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/cozystack/cozy-health/deploy/render"
	healthv1alpha1 "github.com/cozystack/cozy-health/pkg/apis/health/v1alpha1"
	ac "github.com/cozystack/cozy-health/pkg/applyconfiguration/health/v1alpha1"
	"github.com/cozystack/cozy-health/pkg/client/clientset/versioned"
	"github.com/cozystack/cozy-health/test/harness"
)

const fieldManager = "cozy-health-aggregator"

// setup starts a control plane with the CRD installed and the namespaces of
// the tests.
func setup(t *testing.T) (*harness.ControlPlane, versioned.Interface) {
	t.Helper()
	ctx := context.Background()
	cp := harness.Start(t)
	require.NoError(t, cp.InstallCRDs(ctx))
	for _, ns := range []string{"cozy-system", "tenant-foo"} {
		require.NoError(t, cp.EnsureNamespace(ctx, ns))
	}
	cs, err := versioned.NewForConfig(cp.Config)
	require.NoError(t, err)
	return cp, cs
}

func healthyStatus(now time.Time) *ac.HealthStatusApplyConfiguration {
	return ac.HealthStatus().
		WithOverall(healthv1alpha1.StatusDegraded).
		WithObservedAt(metav1.NewTime(now)).
		WithFreshUntil(metav1.NewTime(now.Add(15*time.Second))).
		WithNodes(map[string]ac.NodeStateApplyConfiguration{
			"node-1": *ac.NodeState().WithStatus(healthv1alpha1.StatusHealthy),
			"node-2": *ac.NodeState().WithStatus(healthv1alpha1.StatusDown).WithReason("ServiceNotRunning").WithMessage("etcd service is Finished"),
		}).
		WithDegradedNodes("node-2").
		WithIssues(1).
		WithConditions(
			ac.HealthCondition().WithType("Quorum").WithStatus(healthv1alpha1.ConditionTrue).
				WithReason("QuorumHeld").WithMessage("2 of 3 voting members healthy, quorum needs 2").
				WithLastTransitionTime(metav1.NewTime(now)),
			ac.HealthCondition().WithType("EtcdMember").WithStatus(healthv1alpha1.ConditionFalse).
				WithReason("ServiceNotRunning").WithMessage("etcd on node-2 is not running").
				WithResourceRef(ac.ResourceRef().WithKind("Node").WithName("node-2")).
				WithLastTransitionTime(metav1.NewTime(now)),
		)
}

func TestHealthServerSideApplyAndPrinterColumns(t *testing.T) {
	ctx := context.Background()
	cp, cs := setup(t)
	healths := cs.HealthV1alpha1().Healths("cozy-system")

	_, err := healths.Apply(ctx, ac.Health("etcd", "cozy-system").WithSpec(ac.HealthSpec().WithComponent("etcd")),
		metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
	require.NoError(t, err)

	now := time.Now().UTC().Truncate(time.Second)
	got, err := healths.ApplyStatus(ctx, ac.Health("etcd", "cozy-system").WithStatus(healthyStatus(now)),
		metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
	require.NoError(t, err)
	assert.Equal(t, healthv1alpha1.StatusDegraded, got.Status.Overall)
	assert.Equal(t, "node-2", got.Status.DegradedNodes)
	require.Len(t, got.Status.Conditions, 2)
	assert.Equal(t, &healthv1alpha1.ResourceRef{Kind: "Node", Name: "node-2"}, got.Status.Conditions[1].ResourceRef)

	// The status went through the status subresource under our one manager.
	// The nodes map is atomic: the apiserver tracks it as one field, not
	// one per node (at 5,000 nodes that set was most of an apply's cost).
	var statusManaged bool
	for _, mf := range got.ManagedFields {
		if mf.Manager == fieldManager && mf.Subresource == "status" && mf.Operation == metav1.ManagedFieldsOperationApply {
			statusManaged = true
			require.NotNil(t, mf.FieldsV1)
			assert.Contains(t, string(mf.FieldsV1.Raw), `"f:nodes":{}`)
			assert.NotContains(t, string(mf.FieldsV1.Raw), `"f:node-2"`)
		}
	}
	assert.True(t, statusManaged, "status owned by %s through the status subresource: %+v", fieldManager, got.ManagedFields)

	// A status sent to the main resource is ignored: status is a subresource.
	_, err = healths.Apply(ctx, ac.Health("etcd", "cozy-system").WithSpec(ac.HealthSpec().WithComponent("etcd")).
		WithStatus(ac.HealthStatus().WithOverall(healthv1alpha1.StatusHealthy)),
		metav1.ApplyOptions{FieldManager: "someone-else", Force: true})
	require.NoError(t, err)
	got, err = healths.Get(ctx, "etcd", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, healthv1alpha1.StatusDegraded, got.Status.Overall)

	// kubectl prints the columns with their values, by short name, across namespaces.
	out, err := cp.Kubectl(ctx, "get", "chz", "-A")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, out)
	assert.Equal(t, []string{"NAMESPACE", "NAME", "OVERALL", "DEGRADED-NODES", "ISSUES", "FRESH-UNTIL", "AGE"}, strings.Fields(lines[0]))
	fields := strings.Fields(lines[1])
	require.Len(t, fields, 7, lines[1])
	assert.Equal(t, []string{"cozy-system", "etcd", "Degraded", "node-2", "1", now.Add(15 * time.Second).Format(time.RFC3339)}, fields[:6])

	// The category works too.
	out, err = cp.Kubectl(ctx, "get", "cozystack", "-n", "cozy-system", "-o", "name")
	require.NoError(t, err)
	assert.Equal(t, "health.health.cozystack.io/etcd", strings.TrimSpace(out))
}

func TestHealthValidation(t *testing.T) {
	ctx := context.Background()
	_, cs := setup(t)
	healths := cs.HealthV1alpha1().Healths("cozy-system")
	apply := metav1.ApplyOptions{FieldManager: fieldManager, Force: true}
	_, err := healths.Apply(ctx, ac.Health("etcd", "cozy-system").WithSpec(ac.HealthSpec().WithComponent("etcd")), apply)
	require.NoError(t, err)
	now := time.Now()
	_, err = healths.ApplyStatus(ctx, ac.Health("etcd", "cozy-system").WithStatus(healthyStatus(now)), apply)
	require.NoError(t, err)
	before, err := healths.Get(ctx, "etcd", metav1.GetOptions{})
	require.NoError(t, err)

	cases := []struct {
		name    string
		do      func() error
		message string
	}{
		{"unknown overall", func() error {
			_, err := healths.ApplyStatus(ctx, ac.Health("etcd", "cozy-system").WithStatus(ac.HealthStatus().WithOverall("Green")), apply)
			return err
		}, `status.overall: Unsupported value: "Green"`},
		{"unknown node status", func() error {
			_, err := healths.ApplyStatus(ctx, ac.Health("etcd", "cozy-system").WithStatus(ac.HealthStatus().
				WithNodes(map[string]ac.NodeStateApplyConfiguration{"node-1": *ac.NodeState().WithStatus("Fine")})), apply)
			return err
		}, `Unsupported value: "Fine"`},
		{"condition status not True/False/Unknown", func() error {
			_, err := healths.ApplyStatus(ctx, ac.Health("etcd", "cozy-system").WithStatus(ac.HealthStatus().
				WithConditions(ac.HealthCondition().WithType("Quorum").WithStatus("Maybe"))), apply)
			return err
		}, `status.conditions[0].status: Unsupported value: "Maybe"`},
		{"condition type not CamelCase", func() error {
			_, err := healths.ApplyStatus(ctx, ac.Health("etcd", "cozy-system").WithStatus(ac.HealthStatus().
				WithConditions(ac.HealthCondition().WithType("fsync latency").WithStatus(healthv1alpha1.ConditionTrue))), apply)
			return err
		}, `status.conditions[0].type`},
		{"spec.component changed", func() error {
			_, err := healths.Apply(ctx, ac.Health("etcd", "cozy-system").WithSpec(ac.HealthSpec().WithComponent("cilium")), apply)
			return err
		}, "spec.component is immutable"},
		{"name differs from component", func() error {
			_, err := healths.Apply(ctx, ac.Health("etcd2", "cozy-system").WithSpec(ac.HealthSpec().WithComponent("etcd")), apply)
			return err
		}, "metadata.name must equal spec.component"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do()
			require.Error(t, err)
			assert.True(t, apierrors.IsInvalid(err), "want Invalid, got %v", err)
			assert.Contains(t, err.Error(), tc.message)
		})
	}

	// Nothing rejected changed the object.
	after, err := healths.Get(ctx, "etcd", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, before.ResourceVersion, after.ResourceVersion)
	assert.Equal(t, before.Spec, after.Spec)
}

func TestTenantReadsOnlyItsNamespace(t *testing.T) {
	ctx := context.Background()
	cp, cs := setup(t)
	apply := metav1.ApplyOptions{FieldManager: fieldManager, Force: true}
	for _, ns := range []string{"cozy-system", "tenant-foo"} {
		_, err := cs.HealthV1alpha1().Healths(ns).Apply(ctx, ac.Health("backups", ns).WithSpec(ac.HealthSpec().WithComponent("backups")), apply)
		require.NoError(t, err)
	}

	// The shipped read-only ClusterRole (rendered from the chart), bound by
	// a RoleBinding in tenant-foo.
	rel, err := render.Render(render.Options{})
	require.NoError(t, err)
	u, err := rel.Object("ClusterRole", "cozy-health-view")
	require.NoError(t, err)
	var role rbacv1.ClusterRole
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &role))
	admin := cp.Clientset()
	_, err = admin.RbacV1().ClusterRoles().Create(ctx, &role, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = admin.RbacV1().RoleBindings("tenant-foo").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant-foo-health-view"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "foo-user"}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	cfg, err := cp.UserConfig("foo-user", "tenant-foo")
	require.NoError(t, err)
	tenant, err := versioned.NewForConfig(cfg)
	require.NoError(t, err)

	require.Eventually(t, func() bool { // RBAC bindings reach the authorizer's cache asynchronously
		_, err := tenant.HealthV1alpha1().Healths("tenant-foo").Get(ctx, "backups", metav1.GetOptions{})
		return err == nil
	}, 10*time.Second, 100*time.Millisecond)
	list, err := tenant.HealthV1alpha1().Healths("tenant-foo").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	assert.Len(t, list.Items, 1)

	_, err = tenant.HealthV1alpha1().Healths("cozy-system").Get(ctx, "backups", metav1.GetOptions{})
	assert.True(t, apierrors.IsForbidden(err), "cozy-system: %v", err)
	_, err = tenant.HealthV1alpha1().Healths("").List(ctx, metav1.ListOptions{})
	assert.True(t, apierrors.IsForbidden(err), "cluster scope: %v", err)

	// Read-only: no writes to spec or status in its own namespace.
	_, err = tenant.HealthV1alpha1().Healths("tenant-foo").ApplyStatus(ctx,
		ac.Health("backups", "tenant-foo").WithStatus(ac.HealthStatus().WithOverall(healthv1alpha1.StatusHealthy)), apply)
	assert.True(t, apierrors.IsForbidden(err), "status write: %v", err)
	err = tenant.HealthV1alpha1().Healths("tenant-foo").Delete(ctx, "backups", metav1.DeleteOptions{})
	assert.True(t, apierrors.IsForbidden(err), "delete: %v", err)

	// kubectl with the tenant's kubeconfig says the same.
	kc, err := cp.UserKubeconfig("foo-user", "tenant-foo")
	require.NoError(t, err)
	out, err := harness.RunKubectl(ctx, cp.Binary("kubectl"), kc, "get", "chz", "-n", "tenant-foo", "-o", "name")
	require.NoError(t, err)
	assert.Equal(t, "health.health.cozystack.io/backups", strings.TrimSpace(out))
	_, err = harness.RunKubectl(ctx, cp.Binary("kubectl"), kc, "get", "chz", "-A")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Forbidden")
}

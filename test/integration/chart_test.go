package integration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/cozystack/cozy-health/deploy/render"
	"github.com/cozystack/cozy-health/test/harness"
)

// chartPlane is a control plane with Pod Security admission as Talos sets it
// (baseline enforced on every unlabelled namespace), the talos.dev
// ServiceAccount CRD Talos serves once the machine-config patch is applied,
// and the platform namespace.
func chartPlane(t *testing.T) *harness.ControlPlane {
	t.Helper()
	cp := harness.StartWith(t, harness.Options{TalosPodSecurity: true})
	ctx := context.Background()
	require.NoError(t, cp.InstallTalosServiceAccountCRD(ctx))
	require.NoError(t, cp.EnsureNamespace(ctx, "cozy-system"))
	return cp
}

// applier applies rendered objects with server-side apply.
type applier struct {
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

func newApplier(t *testing.T, cfg *rest.Config) *applier {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	require.NoError(t, err)
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	return &applier{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}
}

// apply server-side applies obj (dryRun: validated and admitted, not stored).
func (a *applier) apply(ctx context.Context, obj *unstructured.Unstructured, dryRun bool) error {
	gvk := obj.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		a.mapper.Reset()
		if m, err = a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
			return err
		}
	}
	opts := metav1.ApplyOptions{FieldManager: "helm", Force: true}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	var ri dynamic.ResourceInterface = a.dyn.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		ri = a.dyn.Resource(m.Resource).Namespace(obj.GetNamespace())
	}
	_, err = ri.Apply(ctx, obj.GetName(), obj, opts)
	return err
}

// podFrom returns a Pod with the pod template of a rendered workload.
func podFrom(t *testing.T, r *render.Release, kind, name, ns string) *corev1.Pod {
	t.Helper()
	obj, err := r.Object(kind, name)
	require.NoError(t, err)
	tmpl, ok, err := unstructured.NestedMap(obj.Object, "spec", "template")
	require.NoError(t, err)
	require.True(t, ok)
	var pod corev1.Pod
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(tmpl, &pod))
	pod.Name, pod.Namespace = name+"-probe", ns
	pod.Spec.NodeName = "node-1"
	return &pod
}

func createNamespace(t *testing.T, cs kubernetes.Interface, name string, labels map[string]string) {
	t.Helper()
	_, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// TestChartOnTalosPodSecurity renders the chart with several value sets and
// submits every object to a real apiserver that enforces Pod Security as
// Talos does: every object passes server-side validation, the agent's pod is
// admitted in the chart's namespace and refused in an unlabelled one, and the
// aggregator's pod is admitted even where "restricted" is enforced.
func TestChartOnTalosPodSecurity(t *testing.T) {
	ctx := context.Background()
	cp := chartPlane(t)
	cs := cp.Clientset()
	a := newApplier(t, cp.Config)
	// Where Cozystack runs LINSTOR (its Secret linstor-client-tls lives
	// there): the chart's Role on that one Secret goes in it.
	createNamespace(t, cs, "cozy-linstor", nil)

	variants := []struct {
		name string
		opts render.Options
	}{
		{"plain-manifests", render.Options{Set: []string{"namespace.create=true"}}},
		{"delegated", render.Options{Set: []string{"namespace.create=true", "aggregator.drainAuth=delegated"}}},
		{"sources-off", render.Options{Set: []string{"namespace.create=true", "agent.sources.talos.enabled=false", "agent.sources.cilium.runPath=", "aggregator.linstor.url=", "agent.sources.fsyncProbe.hostPath=", "agent.sources.diskstats.enabled=false",
			"agent.sources.kubeOVN.ovsRunPath=", "agent.sources.kubeOVN.ovnRunPath=", "agent.sources.kubeOVN.ovnDBPath="}}},
		{"drain-subjects", render.Options{Values: map[string]any{"namespace": map[string]any{"create": true},
			"drainCheck": map[string]any{"subjects": []any{map[string]any{"kind": "Group", "name": "operators", "apiGroup": "rbac.authorization.k8s.io"}}}}}},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			v.opts.Namespace = "ch-" + v.name
			r, err := render.Render(v.opts)
			require.NoError(t, err)
			objs, err := r.Objects()
			require.NoError(t, err)
			// The namespace is the one thing stored: the namespaced objects
			// can only be validated inside an existing namespace.
			for _, o := range objs {
				if o.GetKind() == "Namespace" {
					require.NoError(t, a.apply(ctx, o, false))
				}
			}
			for _, o := range objs {
				if o.GetKind() == "CustomResourceDefinition" {
					// Applied for real by the harness would conflict on names
					// with other variants' dry runs; the dry run validates it.
					require.NoError(t, a.apply(ctx, o, true), "CRD %s", o.GetName())
					continue
				}
				assert.NoError(t, a.apply(ctx, o, true), "%s %s/%s from the chart", o.GetKind(), o.GetNamespace(), o.GetName())
			}
			// The agent's pod, as the DaemonSet controller would create it.
			pod := podFrom(t, r, "DaemonSet", "cozy-health-agent", v.opts.Namespace)
			_, err = cs.CoreV1().Pods(v.opts.Namespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			assert.NoError(t, err, "agent pod in the chart's namespace")
		})
	}

	r, err := render.Render(render.Options{})
	require.NoError(t, err)

	// Refused where nobody labelled the namespace, naming what baseline forbids.
	createNamespace(t, cs, "plain", nil)
	_, err = cs.CoreV1().Pods("plain").Create(ctx, podFrom(t, r, "DaemonSet", "cozy-health-agent", "plain"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	require.Error(t, err)
	assert.True(t, apierrors.IsForbidden(err), "%v", err)
	assert.Contains(t, err.Error(), `violates PodSecurity "baseline:latest"`)
	assert.Contains(t, err.Error(), "hostNetwork")
	assert.Contains(t, err.Error(), "hostPath volumes")

	// The aggregator needs nothing beyond "restricted".
	createNamespace(t, cs, "strict", map[string]string{"pod-security.kubernetes.io/enforce": "restricted"})
	_, err = cs.CoreV1().Pods("strict").Create(ctx, podFrom(t, r, "Deployment", "cozy-health-aggregator", "strict"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	assert.NoError(t, err, "aggregator pod under restricted")
	// ... and that level means something: the agent's pod is refused there.
	_, err = cs.CoreV1().Pods("strict").Create(ctx, podFrom(t, r, "DaemonSet", "cozy-health-agent", "strict"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	assert.True(t, apierrors.IsForbidden(err), "%v", err)
}

// An install (lookups answered by the cluster) into a namespace that would
// refuse the agent fails at once with the command that fixes it, instead of
// a DaemonSet that never creates a pod.
func TestChartRefusesAnUnlabelledNamespace(t *testing.T) {
	cp := chartPlane(t)
	cs := cp.Clientset()
	createNamespace(t, cs, "unlabelled", nil)
	_, err := render.Render(render.Options{Namespace: "unlabelled", Cluster: cp.Config})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "kubectl label namespace unlabelled pod-security.kubernetes.io/enforce=privileged")

	createNamespace(t, cs, "labelled", map[string]string{"pod-security.kubernetes.io/enforce": "privileged"})
	_, err = render.Render(render.Options{Namespace: "labelled", Cluster: cp.Config})
	assert.NoError(t, err)
	_, err = render.Render(render.Options{Namespace: "unlabelled", Cluster: cp.Config, Set: []string{"namespace.requirePrivileged=false"}})
	assert.NoError(t, err, "the check can be turned off")
}

// The drain-check ClusterRole lets its subjects through the Kubernetes API
// service proxy to the aggregator's Service, and to nothing else; without
// it the proxy refuses them.
func TestChartDrainCheckRole(t *testing.T) {
	ctx := context.Background()
	cp := chartPlane(t)
	a := newApplier(t, cp.Config)
	r, err := render.Render(render.Options{Values: map[string]any{"namespace": map[string]any{"create": true},
		"drainCheck": map[string]any{"subjects": []any{map[string]any{"kind": "Group", "name": "operators", "apiGroup": "rbac.authorization.k8s.io"}}}}})
	require.NoError(t, err)
	objs, err := r.Objects()
	require.NoError(t, err)
	for _, o := range objs {
		require.NoError(t, a.apply(ctx, o, false), "%s %s", o.GetKind(), o.GetName())
	}

	get := func(cfg *rest.Config, svc string) error {
		cs, err := kubernetes.NewForConfig(cfg)
		require.NoError(t, err)
		return cs.CoreV1().RESTClient().Get().Namespace("cozy-health").Resource("services").Name(svc).
			SubResource("proxy").Suffix("v1", "drain-check").Param("node", "node-1").Do(ctx).Error()
	}
	op, err := cp.UserConfig("alice", "operators")
	require.NoError(t, err)
	other, err := cp.UserConfig("mallory", "tenants")
	require.NoError(t, err)

	require.EventuallyWithT(t, func(c *assert.CollectT) { // bindings reach the authorizer's cache asynchronously
		err := get(op, "cozy-health-aggregator:http")
		// Authorized: the proxy then finds no ready replica behind the Service.
		assert.False(c, apierrors.IsForbidden(err), "operator through the proxy: %v", err)
		assert.True(c, apierrors.IsServiceUnavailable(err), "operator through the proxy: %v", err)
	}, 10*time.Second, 100*time.Millisecond)
	assert.True(t, apierrors.IsForbidden(get(other, "cozy-health-aggregator:http")), "a subject without the role")
	assert.True(t, apierrors.IsForbidden(get(op, "kubernetes:https")), "the role opens no other Service")

	// With delegated auth the aggregator asks the same question of the
	// nonResourceURL; the role answers yes for its subjects only.
	cs := cp.Clientset()
	sar := func(user string, groups ...string) bool {
		res, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: groups, NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/v1/drain-check", Verb: "get"},
		}}, metav1.CreateOptions{})
		require.NoError(t, err)
		return res.Status.Allowed
	}
	assert.True(t, sar("alice", "operators"))
	assert.False(t, sar("mallory", "tenants"))
}

// The plain manifests and the Helm install differ only by the Namespace.
func TestManifestsAreTheHelmInstallPlusNamespace(t *testing.T) {
	helm, err := render.Render(render.Options{})
	require.NoError(t, err)
	plain, err := render.Render(render.Options{Set: []string{"namespace.create=true"}})
	require.NoError(t, err)
	var extra []string
	seen := map[string]bool{}
	for _, m := range helm.All() {
		b, _ := json.Marshal(m)
		seen[string(b)] = true
	}
	for _, m := range plain.All() {
		b, _ := json.Marshal(m)
		if !seen[string(b)] {
			extra = append(extra, m.Kind+"/"+m.Name)
		}
	}
	assert.Equal(t, []string{"Namespace/cozy-health"}, extra, strings.Join(extra, ", "))
}

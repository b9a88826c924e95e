package noderole

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/cozystack/cozy-health/deploy/render"
	"github.com/cozystack/cozy-health/test/harness"
	"github.com/cozystack/cozy-health/test/sources/kubeapi"
)

func TestRole(t *testing.T) {
	srv, err := kubeapi.Start(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	srv.SetNode("cp-1", map[string]string{ControlPlaneLabel: "", "kubernetes.io/hostname": "cp-1"})
	srv.SetNode("worker-1", map[string]string{"kubernetes.io/hostname": "worker-1"})
	tok := filepath.Join(t.TempDir(), "token")
	require.NoError(t, kubeapi.WriteToken(tok))
	ctx := context.Background()
	read := func(node, tokenFile string) (Role, error) {
		r, err := New(Config{Server: srv.URL, TokenFile: tokenFile, CAFile: srv.CAFile, NodeName: node})
		require.NoError(t, err)
		return r.Role(ctx)
	}
	role, err := read("cp-1", tok)
	require.NoError(t, err)
	assert.Equal(t, ControlPlane, role)
	role, err = read("worker-1", tok)
	require.NoError(t, err)
	assert.Equal(t, Worker, role)

	role, err = read("other", tok)
	assert.Equal(t, Unknown, role)
	assert.ErrorContains(t, err, "HTTP 404")
	role, err = read("cp-1", filepath.Join(t.TempDir(), "absent"))
	assert.Equal(t, Unknown, role)
	assert.ErrorContains(t, err, "read token")

	var none *Reader
	role, err = none.Role(ctx)
	assert.Equal(t, Unknown, role)
	assert.Error(t, err)

	// An answer is reused for CacheFor, then read again.
	r, err := New(Config{Server: srv.URL, TokenFile: tok, CAFile: srv.CAFile, NodeName: "cp-1"})
	require.NoError(t, err)
	now := time.Unix(1000, 0)
	r.now = func() time.Time { return now }
	before := srv.Gets.Load()
	for range 3 {
		role, err = r.Role(ctx)
		require.NoError(t, err)
		assert.Equal(t, ControlPlane, role)
	}
	assert.Equal(t, before+1, srv.Gets.Load())
	now = now.Add(CacheFor)
	_, err = r.Role(ctx)
	require.NoError(t, err)
	assert.Equal(t, before+2, srv.Gets.Load())
}

func TestServerFromEnv(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "443")
	assert.Equal(t, "https://[fd00::1]:443", ServerFromEnv())
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	assert.Equal(t, "", ServerFromEnv())
}

// TestRoleFromRealAPIServer: against the real kube-apiserver and
// authorizer, with the chart's agent ClusterRole and a token of the agent's
// ServiceAccount, the reader tells the control-plane Node from the worker;
// the agent may get Nodes and nothing more.
func TestRoleFromRealAPIServer(t *testing.T) {
	harness.SkipShort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp, err := harness.StartControlPlane(ctx, harness.Options{Dir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cp.Stop() })
	const ns, sa = "cozy-health", "cozy-health-agent"
	require.NoError(t, cp.EnsureNamespace(ctx, ns))
	require.NoError(t, cp.CreateServiceAccount(ctx, ns, sa))
	r, err := render.Render(render.Options{Namespace: ns})
	require.NoError(t, err)
	cs := cp.Clientset()
	obj, err := r.Object("ClusterRole", sa)
	require.NoError(t, err)
	var role rbacv1.ClusterRole
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &role))
	_, err = cs.RbacV1().ClusterRoles().Create(ctx, &role, metav1.CreateOptions{})
	require.NoError(t, err)
	obj, err = r.Object("ClusterRoleBinding", sa)
	require.NoError(t, err)
	var binding rbacv1.ClusterRoleBinding
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &binding))
	_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &binding, metav1.CreateOptions{})
	require.NoError(t, err)

	_, err = cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cp-1",
		Labels: map[string]string{ControlPlaneLabel: ""}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	pod, err := cp.CreateNodeAndPod(ctx, "worker-1", ns, "agent-worker-1", sa)
	require.NoError(t, err)
	// A token for the API server's audience, as the chart's projected
	// kube-api-access volume holds.
	tok, err := cp.PodBoundToken(ctx, ns, sa, pod.Name, nil, time.Hour)
	require.NoError(t, err)
	dir := t.TempDir()
	tokFile, caFile := filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt")
	require.NoError(t, os.WriteFile(tokFile, []byte(tok), 0o600))
	require.NoError(t, os.WriteFile(caFile, cp.Config.CAData, 0o600))

	read := func(node string) (Role, error) {
		rd, err := New(Config{Server: cp.APIServerURL, TokenFile: tokFile, CAFile: caFile, NodeName: node})
		require.NoError(t, err)
		return rd.Role(ctx)
	}
	var got Role
	require.Eventually(t, func() bool { // bindings reach the authorizer's cache asynchronously
		got, err = read("cp-1")
		return err == nil
	}, 10*time.Second, 100*time.Millisecond, "get Node cp-1: %v", err)
	assert.Equal(t, ControlPlane, got)
	got, err = read("worker-1")
	require.NoError(t, err)
	assert.Equal(t, Worker, got)
	got, err = read("absent")
	assert.Equal(t, Unknown, got)
	assert.ErrorContains(t, err, "HTTP 404")

	// Nothing more than get.
	cfg := rest.AnonymousClientConfig(cp.Config)
	cfg.BearerToken = tok
	agent, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	_, err = agent.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	assert.True(t, apierrors.IsForbidden(err), "list nodes: %v", err)
	_, err = agent.CoreV1().Nodes().Patch(ctx, "worker-1", types.MergePatchType, []byte(`{"metadata":{"labels":{"`+ControlPlaneLabel+`":""}}}`), metav1.PatchOptions{})
	assert.True(t, apierrors.IsForbidden(err), "label its Node control-plane: %v", err)
}

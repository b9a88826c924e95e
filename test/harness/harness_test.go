package harness

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestControlPlaneLifecycle(t *testing.T) {
	ctx := context.Background()
	cp := Start(t)

	out, err := cp.Kubectl(ctx, "version", "-o", "json")
	require.NoError(t, err)
	assert.Contains(t, out, `"gitVersion": "`+KubernetesVersion+`"`)

	// A pod-bound token's review names the node it is bound to.
	require.NoError(t, cp.CreateServiceAccount(ctx, "cozy-health", "cozy-health-agent"))
	_, err = cp.CreateNodeAndPod(ctx, "cp1", "cozy-health", "agent-cp1", "cozy-health-agent")
	require.NoError(t, err)
	tok, err := cp.PodBoundToken(ctx, "cozy-health", "cozy-health-agent", "agent-cp1", []string{"health.cozystack.io"}, 10*time.Minute)
	require.NoError(t, err)
	tr, err := cp.Clientset().AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: tok, Audiences: []string{"health.cozystack.io"}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.True(t, tr.Status.Authenticated, tr.Status.Error)
	assert.Equal(t, "system:serviceaccount:cozy-health:cozy-health-agent", tr.Status.User.Username)
	assert.Equal(t, authenticationv1.ExtraValue{"cp1"}, tr.Status.User.Extra["authentication.kubernetes.io/node-name"])

	// An x509 user is authenticated and subject to RBAC: no binding, no access.
	cfg, err := cp.UserConfig("alice", "tenants")
	require.NoError(t, err)
	_, err = newClient(t, cfg).CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `User "alice" cannot list resource "namespaces"`)

	// The apiserver can be stopped and restarted on the same port.
	require.NoError(t, cp.StopAPIServer())
	_, err = cp.Clientset().CoreV1().Namespaces().Get(ctx, "cozy-health", metav1.GetOptions{})
	require.Error(t, err)
	require.NoError(t, cp.StartAPIServer(ctx))
	_, err = cp.Clientset().CoreV1().Namespaces().Get(ctx, "cozy-health", metav1.GetOptions{})
	require.NoError(t, err, "data survives an apiserver restart")

	// Stop leaves no process behind.
	etcdPid, apiPid := cp.Pids()
	require.NoError(t, cp.Stop())
	for _, pid := range []int{etcdPid, apiPid} {
		err := syscall.Kill(pid, 0)
		assert.ErrorIs(t, err, syscall.ESRCH, "pid %d still running", pid)
	}
	require.NoError(t, cp.Stop(), "Stop is idempotent")
}

func TestRepoRoot(t *testing.T) {
	root := RepoRoot()
	require.NotEmpty(t, root)
	assert.False(t, strings.HasSuffix(root, "test/harness"))
}

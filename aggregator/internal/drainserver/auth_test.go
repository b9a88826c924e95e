package drainserver

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cozystack/cozy-health/aggregator/internal/delegated"
	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
	"github.com/cozystack/cozy-health/test/harness"
)

// TestDelegatedAuthOnRealAPIServer: the optional Authorizer asks a real
// kube-apiserver (TokenReview + SubjectAccessReview on nonResourceURL
// /v1/drain-check, verb get) and the handler and gRPC server obey it.
func TestDelegatedAuthOnRealAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp := harness.Start(t)
	cs := cp.Clientset()
	const ns = "cozy-health"
	require.NoError(t, cp.EnsureNamespace(ctx, ns))
	require.NoError(t, cp.CreateServiceAccount(ctx, ns, "upgrader"))
	require.NoError(t, cp.CreateServiceAccount(ctx, ns, "nobody"))
	_, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "cozy-health-drain-check"},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{Path}, Verbs: []string{"get"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "cozy-health-drain-check"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cozy-health-drain-check"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "upgrader"}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	token := func(sa string) string {
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		require.NoError(t, err)
		return tr.Status.Token
	}
	allowed, denied := token("upgrader"), token("nobody")

	svc, _, _ := newTestService(t, blockedCluster())
	auth := NewAuthorizerFrom(delegated.New(cs, time.Second))
	base := serveHTTP(t, NewHandler(svc, auth))

	// RBAC may take a moment to reach the authorizer's cache: eventually.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		auth.d.Reset()
		code, body := get(t, base+Path+"?node=node-1", allowed)
		assert.Equal(c, http.StatusOK, code, body)
		assert.Equal(c, "blocked", body["verdict"])
	}, time.Minute, 500*time.Millisecond)

	code, body := get(t, base+Path+"?node=node-1", denied)
	assert.Equal(t, http.StatusForbidden, code)
	assert.Contains(t, body["error"], "system:serviceaccount:cozy-health:nobody may not get /v1/drain-check")
	code, _ = get(t, base+Path+"?node=node-1", "")
	assert.Equal(t, http.StatusUnauthorized, code)
	code, _ = get(t, base+Path+"?node=node-1", "not-a-token")
	assert.Equal(t, http.StatusUnauthorized, code)
	assert.GreaterOrEqual(t, testutil.ToFloat64(svc.m.rejected.WithLabelValues("http", "forbidden")), 1.0)
	assert.Equal(t, 2.0, testutil.ToFloat64(svc.m.rejected.WithLabelValues("http", "unauthenticated")))

	// gRPC: the same authorizer reads "authorization" metadata.
	client := serveGRPC(t, svc, auth)
	resp, err := client.DrainCheck(bearer(ctx, allowed), &pb.DrainCheckRequest{Node: "node-1"})
	require.NoError(t, err)
	assert.Equal(t, pb.Verdict_VERDICT_BLOCKED, resp.Verdict)
	_, err = client.DrainCheck(bearer(ctx, denied), &pb.DrainCheckRequest{Node: "node-1"})
	assert.Equal(t, codes.PermissionDenied, status.Code(err))
	_, err = client.DrainCheck(ctx, &pb.DrainCheckRequest{Node: "node-1"})
	assert.Equal(t, codes.Unauthenticated, status.Code(err))
}

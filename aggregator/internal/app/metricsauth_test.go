package app

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	authenticationv1 "k8s.io/api/authentication/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cozystack/cozy-health/aggregator/internal/config"
)

// TestMetricsDelegatedAuth runs the aggregator with --metrics-auth=delegated
// against a real apiserver: /metrics answers a ServiceAccount allowed get
// on nonResourceURL /metrics, and nobody else. Before, it answered anyone
// who reached the port.
func TestMetricsDelegatedAuth(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp := startPlane(t)
	cs := cp.Clientset()
	require.NoError(t, cp.EnsureNamespace(ctx, "monitoring"))
	for _, sa := range []string{"scraper", "tenant"} {
		require.NoError(t, cp.CreateServiceAccount(ctx, "monitoring", sa))
	}
	_, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader"},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "monitoring", Name: "scraper"}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	token := func(sa string) string {
		tr, err := cs.CoreV1().ServiceAccounts("monitoring").CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		require.NoError(t, err)
		return tr.Status.Token
	}
	scraper, tenant := token("scraper"), token("tenant")

	cfg := testConfig(t, "metrics-auth")
	cfg.MetricsAuth = config.MetricsAuthDelegated
	require.NoError(t, cfg.Validate())
	a := startReplica(t, cp.Config, cfg, zaptest.NewLogger(t)).app
	get := func(tok string) int {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.MetricsAddr()+"/metrics", nil)
		require.NoError(t, err)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	// RBAC reaches the apiserver's authorizer cache in a moment; the
	// aggregator caches decisions 10 s.
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, http.StatusOK, get(scraper)) }, time.Minute, time.Second)
	assert.Equal(t, http.StatusUnauthorized, get(""))
	assert.Equal(t, http.StatusUnauthorized, get("junk"))
	assert.Equal(t, http.StatusForbidden, get(tenant))
}

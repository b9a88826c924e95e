package ingest

import (
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cozystack/cozy-health/pkg/metrictest"
	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/pkg/signing"
	"github.com/cozystack/cozy-health/test/harness"
)

const agentNS, agentSA = "cozy-health", "cozy-health-agent"

// TestIdentityAgainstARealAPIServer checks stream authentication with real
// pod-bound ServiceAccount tokens and real TokenReviews.
func TestIdentityAgainstARealAPIServer(t *testing.T) {
	cp := harness.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	require.NoError(t, cp.CreateServiceAccount(ctx, agentNS, agentSA))
	require.NoError(t, cp.CreateServiceAccount(ctx, agentNS, "other"))
	for _, p := range []struct{ node, pod, sa string }{
		{"cp1", "agent-cp1", agentSA}, {"cp2", "agent-cp2", agentSA}, {"cp1", "other-cp1", "other"}, {"cp1", "doomed-cp1", agentSA},
	} {
		_, err := cp.CreateNodeAndPod(ctx, p.node, agentNS, p.pod, p.sa)
		require.NoError(t, err)
	}
	aud := []string{DefaultTokenAudience}
	token := func(sa, pod string, audiences []string) string {
		tok, err := cp.PodBoundToken(ctx, agentNS, sa, pod, audiences, 10*time.Minute)
		require.NoError(t, err)
		return tok
	}
	tokCP1 := token(agentSA, "agent-cp1", aud)
	tokCP2 := token(agentSA, "agent-cp2", aud)
	tokOther := token("other", "other-cp1", aud)
	tokWrongAud := token(agentSA, "agent-cp1", []string{"https://kubernetes.default.svc.cluster.local"})
	tokDoomed := token(agentSA, "doomed-cp1", aud)
	zero := int64(0)
	require.NoError(t, cp.Clientset().CoreV1().Pods(agentNS).Delete(ctx, "doomed-cp1", metav1.DeleteOptions{GracePeriodSeconds: &zero}))
	require.Eventually(t, func() bool {
		_, err := cp.Clientset().CoreV1().Pods(agentNS).Get(ctx, "doomed-cp1", metav1.GetOptions{})
		return err != nil
	}, 30*time.Second, 100*time.Millisecond)
	expiry := int64(3600)
	unbound, err := cp.Clientset().CoreV1().ServiceAccounts(agentNS).CreateToken(ctx, agentSA,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: aud, ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	require.NoError(t, err)
	// An expired token, for real: cp1's token with its times moved an hour
	// into the past, re-signed with the apiserver's own ServiceAccount key.
	// The same re-signing with times in the future must pass, which proves
	// that only the expiry fails the expired one.
	saKey := loadRSAKey(t, filepath.Join(cp.Dir, "pki", "sa.key"))
	tokExpired := resign(t, tokCP1, saKey, time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour))
	tokResigned := resign(t, tokCP1, saKey, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))

	ts := startServer(t, Config{TokenReviewCacheTTL: time.Minute}, Deps{TokenReviews: cp.Clientset().AuthenticationV1().TokenReviews()})
	keys := map[string]*signing.Signer{}
	for _, n := range []string{"cp1", "cp2", "x"} {
		keys[n], err = signing.Generate()
		require.NoError(t, err)
	}

	t.Run("cp1's token: reports for cp1 accepted, for cp2 rejected", func(t *testing.T) {
		a, ack, err := connect(t, ts, keys["cp1"], "cp1", tokCP1)
		require.NoError(t, err)
		require.True(t, ack.GetAccepted(), ack.GetRejectReason())
		assert.True(t, a.send(a.next(nil)).GetAccepted())
		assert.Equal(t, 1, ts.sink.count("cp1"))

		before := rejected(t, ts, ReasonNodeMismatch)
		got := a.send(a.next(func(r *report.NodeReport) { r.NodeName = "cp2" }))
		assert.False(t, got.GetAccepted())
		assert.Equal(t, ReasonNodeMismatch, got.GetRejectReason())
		assert.Equal(t, before+1, rejected(t, ts, ReasonNodeMismatch))
		assert.Zero(t, ts.sink.count("cp2"))
		assert.True(t, a.send(a.next(nil)).GetAccepted(), "the stream goes on for cp1")
	})
	t.Run("cp2's own token works for cp2", func(t *testing.T) {
		a, ack, err := connect(t, ts, keys["cp2"], "cp2", tokCP2)
		require.NoError(t, err)
		require.True(t, ack.GetAccepted(), ack.GetRejectReason())
		assert.True(t, a.send(a.next(nil)).GetAccepted())
		assert.Equal(t, 1, ts.sink.count("cp2"))
	})
	t.Run("re-signed token with valid times is accepted", func(t *testing.T) {
		_, ack, err := connect(t, ts, keys["x"], "cp1", tokResigned)
		require.NoError(t, err)
		require.True(t, ack.GetAccepted(), ack.GetRejectReason())
	})

	for _, tc := range []struct {
		name   string
		node   string
		token  string
		reason string
		code   codes.Code
		// why is a fragment of the logged detail.
		why string
	}{
		{"cp1's token claiming cp2 in the hello", "cp2", tokCP1, ReasonNodeMismatch, codes.PermissionDenied, "token is bound to cp1"},
		{"another ServiceAccount", "cp1", tokOther, ReasonWrongServiceAccount, codes.PermissionDenied, "system:serviceaccount:cozy-health:other"},
		{"wrong audience", "cp1", tokWrongAud, ReasonUnauthenticated, codes.Unauthenticated, "audience"},
		{"expired token", "cp1", tokExpired, ReasonUnauthenticated, codes.Unauthenticated, "expired"},
		{"token of a deleted pod", "cp1", tokDoomed, ReasonUnauthenticated, codes.Unauthenticated, "invalidated"},
		{"token not bound to a pod", "cp1", unbound.Status.Token, ReasonUnauthenticated, codes.Unauthenticated, "no node-name claim"},
		{"garbage token (refused without a review)", "cp1", "not.a.token", ReasonUnauthenticated, codes.Unauthenticated, "not a JWT"},
		{"no token at all", "cp1", "", ReasonUnauthenticated, codes.Unauthenticated, "no token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := rejected(t, ts, tc.reason)
			_, ack, err := connect(t, ts, keys["x"], tc.node, tc.token)
			require.NotNil(t, ack, "%v", err)
			assert.False(t, ack.GetAccepted())
			assert.Equal(t, tc.reason, ack.GetRejectReason())
			assert.Equal(t, tc.code, status.Code(err), "%v", err)
			assert.Contains(t, status.Convert(err).Message(), tc.why)
			assert.Equal(t, before+1, rejected(t, ts, tc.reason))
		})
	}

	t.Run("the stream of a pod deleted later is closed at its next re-review", func(t *testing.T) {
		_, err := cp.CreateNodeAndPod(ctx, "cp3", agentNS, "late-cp3", agentSA)
		require.NoError(t, err)
		tok := token(agentSA, "late-cp3", aud)
		ts := startServer(t, Config{TokenReviewCacheTTL: time.Millisecond, Surface: SurfaceLimits{ReauthPeriod: 500 * time.Millisecond}},
			Deps{TokenReviews: cp.Clientset().AuthenticationV1().TokenReviews()})
		a, ack, err := connect(t, ts, keys["x"], "cp3", tok)
		require.NoError(t, err)
		require.True(t, ack.GetAccepted(), ack.GetRejectReason())
		assert.True(t, a.send(a.next(nil)).GetAccepted())
		require.NoError(t, cp.Clientset().CoreV1().Pods(agentNS).Delete(ctx, "late-cp3", metav1.DeleteOptions{GracePeriodSeconds: &zero}))
		_, err = a.stream.Recv()
		require.Error(t, err, "the stream ends once the pod is gone")
		assert.Equal(t, 1.0, rejected(t, ts, ReasonRevoked))
	})
	t.Run("a reconnect storm is served from the cache", func(t *testing.T) {
		reviewed := metrictest.Value(t, ts.reg, "cozy_health_ingest_token_reviews_total", "result", "reviewed")
		cached := metrictest.Value(t, ts.reg, "cozy_health_ingest_token_reviews_total", "result", "cached")
		const storm = 50
		var wg sync.WaitGroup
		var mu sync.Mutex
		ok := 0
		for range storm {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// One stream per node: a newer stream of cp1 closes an
				// older one's connection, maybe before its ack arrives.
				_, ack, err := connect(t, ts, keys["cp1"], "cp1", tokCP1)
				if (err == nil && ack.GetAccepted()) || status.Code(err) == codes.Unavailable {
					mu.Lock()
					ok++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		assert.Equal(t, storm, ok)
		assert.Equal(t, reviewed, metrictest.Value(t, ts.reg, "cozy_health_ingest_token_reviews_total", "result", "reviewed"), "no TokenReview")
		assert.Equal(t, cached+storm, metrictest.Value(t, ts.reg, "cozy_health_ingest_token_reviews_total", "result", "cached"))
	})
	t.Run("a burst of new tokens shares one review per token", func(t *testing.T) {
		fresh := token(agentSA, "agent-cp1", aud)
		reviewed := metrictest.Value(t, ts.reg, "cozy_health_ingest_token_reviews_total", "result", "reviewed")
		var wg sync.WaitGroup
		for range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, ack, err := connect(t, ts, keys["cp1"], "cp1", fresh)
				if status.Code(err) != codes.Unavailable { // replaced by a newer stream of cp1
					assert.NoError(t, err)
					assert.True(t, ack.GetAccepted())
				}
			}()
		}
		wg.Wait()
		assert.Equal(t, reviewed+1, metrictest.Value(t, ts.reg, "cozy_health_ingest_token_reviews_total", "result", "reviewed"))
	})
}

func loadRSAKey(t *testing.T, path string) *rsa.PrivateKey {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	blk, _ := pem.Decode(b)
	require.NotNil(t, blk)
	k, err := x509.ParsePKCS1PrivateKey(blk.Bytes)
	require.NoError(t, err)
	return k
}

// resign rewrites a JWT's iat/nbf/exp and signs it again (RS256) with key.
func resign(t *testing.T, token string, key *rsa.PrivateKey, issued, expires time.Time) string {
	t.Helper()
	parts := strings.Split(token, ".")
	require.Len(t, parts, 3)
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	require.NoError(t, err)
	var claims map[string]any
	require.NoError(t, json.Unmarshal(raw, &claims))
	claims["iat"], claims["nbf"], claims["exp"] = issued.Unix(), issued.Unix(), expires.Unix()
	if k8s, ok := claims["kubernetes.io"].(map[string]any); ok {
		delete(k8s, "warnafter")
	}
	raw, err = json.Marshal(claims)
	require.NoError(t, err)
	signed := parts[0] + "." + base64.RawURLEncoding.EncodeToString(raw)
	sum := sha256.Sum256([]byte(signed))
	sig, err := rsa.SignPKCS1v15(nil, key, crypto.SHA256, sum[:])
	require.NoError(t, err)
	return signed + "." + base64.RawURLEncoding.EncodeToString(sig)
}

package delegated

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// fakeAPI authenticates "scraper" (allowed get /metrics) and "tenant"
// (allowed nothing); it counts TokenReviews.
func fakeAPI() (*fake.Clientset, *atomic.Int64) {
	var reviews atomic.Int64
	cs := fake.NewClientset()
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, kruntime.Object, error) {
		reviews.Add(1)
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		switch sub := subOf(tr.Spec.Token); sub {
		case "scraper", "tenant":
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "system:serviceaccount:x:" + sub}}
		default:
			tr.Status = authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}
		}
		return true, tr, nil
	})
	cs.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, kruntime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
		na := sar.Spec.NonResourceAttributes
		sar.Status.Allowed = sar.Spec.User == "system:serviceaccount:x:scraper" && na != nil && na.Path == "/metrics" && na.Verb == "get"
		return true, sar, nil
	})
	return cs, &reviews
}

// jwt is a token shaped like a ServiceAccount token for sub (the fake
// apiserver authenticates by sub), expiring in an hour.
func jwt(sub string) string { return jwtExp(sub, time.Now().Add(time.Hour)) }

func jwtExp(sub string, exp time.Time) string {
	enc := base64.RawURLEncoding.EncodeToString
	claims, _ := json.Marshal(map[string]any{"sub": sub, "exp": exp.Unix(), "aud": []string{"https://kubernetes.default.svc"}})
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc(claims) + ".c2ln"
}

// subOf is the sub claim of a jwt token.
func subOf(token string) string {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return ""
	}
	raw, _ := base64.RawURLEncoding.DecodeString(parts[1])
	var c struct{ Sub string }
	_ = json.Unmarshal(raw, &c)
	return c.Sub
}

// TestMetricsOnlyForTheScraper: /metrics behind the Handler answers only a
// caller allowed get on nonResourceURL /metrics. Before, every pod read it
// (and with it every tenant's namespaces and resources in cozy_health_issue).
func TestMetricsOnlyForTheScraper(t *testing.T) {
	cs, _ := fakeAPI()
	var rejected []string
	srv := httptest.NewServer(New(cs, time.Minute).Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("cozy_health_issue 1\n"))
	}), func(reason string, _ error) { rejected = append(rejected, reason) }))
	defer srv.Close()
	get := func(path, token string) int {
		req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, http.StatusUnauthorized, get("/metrics", ""))
	assert.Equal(t, http.StatusUnauthorized, get("/metrics", jwt("junk")))
	assert.Equal(t, http.StatusForbidden, get("/metrics", jwt("tenant")))
	assert.Equal(t, http.StatusOK, get("/metrics", jwt("scraper")))
	// Authorized per path: /metrics does not open /debug/pprof/.
	assert.Equal(t, http.StatusForbidden, get("/debug/pprof/", jwt("scraper")))
	assert.Equal(t, []string{ReasonUnauthenticated, ReasonUnauthenticated, ReasonForbidden, ReasonForbidden}, rejected)
}

// TestReviewsAreBudgeted: 200 junk tokens cost at most the burst in
// TokenReviews; the rest are refused as throttled without a call, and a
// junk token seen again is answered from the cache.
func TestReviewsAreBudgeted(t *testing.T) {
	cs, reviews := fakeAPI()
	a := New(cs, time.Minute)
	a.SetRate(1, 10)
	var throttled int
	for i := range 200 {
		_, err := a.Authorize(t.Context(), jwt(fmt.Sprintf("junk-%d", i)), "/metrics", "")
		require.Error(t, err)
		if ReasonOf(err) == ReasonThrottled {
			throttled++
		}
	}
	assert.LessOrEqual(t, reviews.Load(), int64(12))
	assert.GreaterOrEqual(t, throttled, 188)
	before := reviews.Load()
	_, err := a.Authorize(t.Context(), jwt("junk-0"), "/metrics", "")
	assert.ErrorIs(t, err, ErrUnauthenticated)
	assert.Equal(t, before, reviews.Load(), "a known-bad token is answered from the cache")
}

// TestOneClientCannotStarveTheScraper: one address flooding well-formed
// junk tokens (each worth a review) spends its own budget, not the
// replica's: the scraper, from another address, is answered at every
// 30 s scrape of a sustained flood. Tokens that are no JWT, or expired,
// cost no review at all. Before, 60 junk tokens spent the shared budget
// and the scraper got 429 at every scrape (0 of 20).
func TestOneClientCannotStarveTheScraper(t *testing.T) {
	cs, reviews := fakeAPI()
	a := New(cs, 10*time.Second)
	now := time.Now()
	a.now = func() time.Time { return now }
	scraper := jwt("scraper")
	ok := 0
	for round := range 20 {
		for i := range 60 {
			_, err := a.Authorize(t.Context(), jwt(fmt.Sprintf("junk-%d-%d", round, i)), "/metrics", "10.0.0.66:40000")
			require.Error(t, err)
		}
		if _, err := a.Authorize(t.Context(), scraper, "/metrics", "10.0.0.7:51234"); err == nil {
			ok++
		} else {
			t.Logf("scrape %d: %v", round, err)
		}
		now = now.Add(30 * time.Second)
	}
	assert.Equal(t, 20, ok, "scrapes answered during the flood")

	before := reviews.Load()
	for i := range 1000 {
		for _, tok := range []string{fmt.Sprintf("junk-%d", i), jwtExp(fmt.Sprintf("old-%d", i), now.Add(-time.Minute)), "a.b.c", strings.Repeat("x", 20<<10)} {
			_, err := a.Authorize(t.Context(), tok, "/metrics", "10.0.0.67:1")
			require.ErrorIs(t, err, ErrUnauthenticated)
		}
	}
	assert.Equal(t, before, reviews.Load(), "tokens that are no JWT or expired cost no TokenReview")
}

package delegated

import (
	"fmt"
	"net/http"
	"net/http/httptest"
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
		switch tr.Spec.Token {
		case "scraper", "tenant":
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "system:serviceaccount:x:" + tr.Spec.Token}}
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
	assert.Equal(t, http.StatusUnauthorized, get("/metrics", "junk"))
	assert.Equal(t, http.StatusForbidden, get("/metrics", "tenant"))
	assert.Equal(t, http.StatusOK, get("/metrics", "scraper"))
	// Authorized per path: /metrics does not open /debug/pprof/.
	assert.Equal(t, http.StatusForbidden, get("/debug/pprof/", "scraper"))
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
		_, err := a.Authorize(t.Context(), fmt.Sprintf("junk-%d", i), "/metrics")
		require.Error(t, err)
		if ReasonOf(err) == ReasonThrottled {
			throttled++
		}
	}
	assert.LessOrEqual(t, reviews.Load(), int64(12))
	assert.GreaterOrEqual(t, throttled, 188)
	before := reviews.Load()
	_, err := a.Authorize(t.Context(), "junk-0", "/metrics")
	assert.ErrorIs(t, err, ErrUnauthenticated)
	assert.Equal(t, before, reviews.Load(), "a known-bad token is answered from the cache")
}

package ingest

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
)

// NodeNameExtraKey is the user extra key under which a TokenReview of a
// pod-bound ServiceAccount token returns the node of the Pod (KEP-4193).
const NodeNameExtraKey = "authentication.kubernetes.io/node-name"

// maxCachedTokens bounds the TokenReview cache; past it, expired entries are
// dropped, and if none are, the whole cache.
const maxCachedTokens = 1 << 16

// identity is what a token proves: a rejection reason, or the node it is
// bound to.
type identity struct {
	node string
	// reason is empty for a good token; detail explains a rejection.
	reason, detail string
}

type cachedIdentity struct {
	id      identity
	expires time.Time
}

// tokenAuthenticator checks agent tokens with TokenReviews and caches the
// verdicts, good and bad, for ttl, keyed by the token's SHA-256 (the token
// itself is never kept), so a reconnect storm costs one review per token.
type tokenAuthenticator struct {
	reviews  authenticationv1client.TokenReviewInterface
	audience string
	username string // system:serviceaccount:<ns>:<name>
	ttl      time.Duration
	now      func() time.Time
	m        *metrics
	group    singleflight.Group

	mu    sync.Mutex // guards cache
	cache map[[sha256.Size]byte]cachedIdentity
}

func newTokenAuthenticator(reviews authenticationv1client.TokenReviewInterface, audience, serviceAccount string, ttl time.Duration, now func() time.Time, m *metrics) (*tokenAuthenticator, error) {
	ns, name, err := splitServiceAccount(serviceAccount)
	if err != nil {
		return nil, err
	}
	return &tokenAuthenticator{
		reviews: reviews, audience: audience, username: "system:serviceaccount:" + ns + ":" + name,
		ttl: ttl, now: now, m: m, cache: map[[sha256.Size]byte]cachedIdentity{},
	}, nil
}

// authenticate returns the token's identity, or an error when the
// TokenReview could not be made (not cached).
func (a *tokenAuthenticator) authenticate(ctx context.Context, token string) (identity, error) {
	key := sha256.Sum256([]byte(token))
	a.mu.Lock()
	c, ok := a.cache[key]
	a.mu.Unlock()
	if ok && a.now().Before(c.expires) {
		a.m.tokenReviews.WithLabelValues(tokenReviewCached).Inc()
		return c.id, nil
	}
	// Concurrent hellos with the same token share one review. The review
	// runs under its own deadline so one stream going away does not fail
	// the others waiting on it.
	v, err, _ := a.group.Do(string(key[:]), func() (any, error) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		id, err := a.review(rctx, token)
		if err != nil {
			a.m.tokenReviews.WithLabelValues(tokenReviewError).Inc()
			return identity{}, err
		}
		a.m.tokenReviews.WithLabelValues(tokenReviewCalled).Inc()
		a.store(key, id)
		return id, nil
	})
	if err != nil {
		return identity{}, err
	}
	return v.(identity), nil
}

func (a *tokenAuthenticator) store(key [sha256.Size]byte, id identity) {
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.cache) >= maxCachedTokens {
		for k, c := range a.cache {
			if !now.Before(c.expires) {
				delete(a.cache, k)
			}
		}
		if len(a.cache) >= maxCachedTokens {
			clear(a.cache)
		}
	}
	a.cache[key] = cachedIdentity{id: id, expires: now.Add(a.ttl)}
}

func (a *tokenAuthenticator) review(ctx context.Context, token string) (identity, error) {
	tr, err := a.reviews.Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{a.audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return identity{}, fmt.Errorf("create token review: %w", err)
	}
	st := tr.Status
	switch {
	case !st.Authenticated:
		detail := st.Error
		if detail == "" {
			detail = "token not authenticated"
		}
		return identity{reason: ReasonUnauthenticated, detail: detail}, nil
	case !slices.Contains(st.Audiences, a.audience):
		// An empty status.audiences means the apiserver is not audience
		// aware; such a token is not known to be meant for us.
		return identity{reason: ReasonUnauthenticated, detail: fmt.Sprintf("token audiences %v do not include %s", st.Audiences, a.audience)}, nil
	case st.User.Username != a.username:
		return identity{reason: ReasonWrongServiceAccount, detail: fmt.Sprintf("token user %s is not %s", st.User.Username, a.username)}, nil
	}
	nodes := st.User.Extra[NodeNameExtraKey]
	if len(nodes) != 1 || nodes[0] == "" {
		return identity{reason: ReasonUnauthenticated, detail: "token is not bound to a pod on a node (no node-name claim)"}, nil
	}
	return identity{node: nodes[0]}, nil
}

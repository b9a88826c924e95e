package ingest

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	"golang.org/x/time/rate"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"

	"github.com/cozystack/cozy-health/aggregator/internal/peerlimit"
)

// NodeNameExtraKey is the user extra key under which a TokenReview of a
// pod-bound ServiceAccount token returns the node of the Pod (KEP-4193).
const NodeNameExtraKey = "authentication.kubernetes.io/node-name"

// maxCachedTokens bounds the TokenReview cache; past it, expired entries are
// dropped, and if none are, the whole cache.
const maxCachedTokens = 1 << 16

// errThrottled: the TokenReview budget is spent; nothing was asked.
var errThrottled = errors.New("token reviews throttled")

// identity is what a token proves: a rejection reason, or the node it is
// bound to.
type identity struct {
	node string
	// expires is the token's exp claim (zero when it has none): the stream
	// it opened is closed by then (see surface.go).
	expires time.Time
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

	// reviews of tokens not in the cache spend from limit (the replica's
	// budget) and from the peer's bucket in peers; over either, the hello
	// is refused with review_throttled and nothing is asked.
	limit *rate.Limiter
	peers *peerlimit.Limiters
	lim   SurfaceLimits

	mu    sync.Mutex // guards cache
	cache map[[sha256.Size]byte]cachedIdentity
}

func newTokenAuthenticator(reviews authenticationv1client.TokenReviewInterface, audience, serviceAccount string, ttl time.Duration, lim SurfaceLimits, now func() time.Time, m *metrics) (*tokenAuthenticator, error) {
	ns, name, err := splitServiceAccount(serviceAccount)
	if err != nil {
		return nil, err
	}
	return &tokenAuthenticator{
		reviews: reviews, audience: audience, username: "system:serviceaccount:" + ns + ":" + name,
		ttl: ttl, now: now, m: m, cache: map[[sha256.Size]byte]cachedIdentity{},
		limit: rate.NewLimiter(rate.Limit(lim.TokenReviewsPerSecond), lim.TokenReviewBurst),
		peers: peerlimit.New(rate.Limit(lim.PeerTokenReviewsPerSecond), lim.PeerTokenReviewBurst), lim: lim,
	}, nil
}

// authenticate returns the token's identity, or an error when the
// TokenReview could not be made (not cached): errThrottled when the
// budget of the replica or of peer (an IP address) is spent. A token that
// is not even shaped like a pod-bound ServiceAccount token for our
// audience is refused without a review.
func (a *tokenAuthenticator) authenticate(ctx context.Context, token, peer string) (identity, error) {
	key := sha256.Sum256([]byte(token))
	if id, ok := a.cached(key); ok {
		a.m.tokenReviews.WithLabelValues(tokenReviewCached).Inc()
		return id, nil
	}
	if _, detail := a.precheck(token); detail != "" {
		a.m.tokenReviews.WithLabelValues(tokenReviewShape).Inc()
		return identity{reason: ReasonUnauthenticated, detail: detail}, nil
	}
	// The peer's bucket first: a flood from one address must not spend
	// the replica's budget that other nodes' agents need.
	now := a.now()
	if (!a.lim.exempt(peer) && !a.peers.Allow(peer, now)) || !a.limit.AllowN(now, 1) {
		a.m.tokenReviews.WithLabelValues(tokenReviewThrottled).Inc()
		return identity{}, errThrottled
	}
	// Concurrent hellos with the same token share one review. The review
	// runs under its own deadline so one stream going away does not fail
	// the others waiting on it.
	v, err, _ := a.group.Do(string(key[:]), func() (any, error) {
		// A review of the same token that finished between the lookup
		// above and this call has stored its verdict: use it.
		if id, ok := a.cached(key); ok {
			a.m.tokenReviews.WithLabelValues(tokenReviewCached).Inc()
			return id, nil
		}
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

// cached is the unexpired verdict on the token hashed to key, if any.
func (a *tokenAuthenticator) cached(key [sha256.Size]byte) (identity, bool) {
	a.mu.Lock()
	c, ok := a.cache[key]
	a.mu.Unlock()
	if !ok || !a.now().Before(c.expires) {
		return identity{}, false
	}
	return c.id, true
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
	// The apiserver verified the signature: the exp claim is now a fact.
	exp, _ := a.precheck(token)
	return identity{node: nodes[0], expires: exp}, nil
}

// jwtClaims are the claims precheck reads, before any signature check.
type jwtClaims struct {
	Exp *float64        `json:"exp"`
	Aud json.RawMessage `json:"aud"`
}

// maxTokenBytes bounds a token worth reviewing; a pod-bound token is
// about 1 KiB.
const maxTokenBytes = 16 << 10

// precheck reads the token's claims without verifying it and returns its
// expiry, or why it cannot be a live pod-bound token for our audience
// (detail non-empty). It spares the apiserver a review of junk; a token
// that passes is still reviewed. An honest token always passes: the
// kubelet's projected tokens are JWTs with exp and the requested audience.
func (a *tokenAuthenticator) precheck(token string) (time.Time, string) {
	parts := strings.Split(token, ".")
	if len(token) > maxTokenBytes || len(parts) != 3 {
		return time.Time{}, "token is not a JWT"
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, "token is not a JWT: payload is not base64url"
	}
	var c jwtClaims
	if err := json.Unmarshal(raw, &c); err != nil {
		return time.Time{}, "token is not a JWT: payload is not a JSON object"
	}
	if c.Exp == nil {
		return time.Time{}, "token has no exp claim"
	}
	exp := time.Unix(int64(*c.Exp), 0)
	if !a.now().Before(exp) {
		return exp, "token expired at " + exp.UTC().Format(time.RFC3339)
	}
	var auds []string
	var one string
	if json.Unmarshal(c.Aud, &one) == nil {
		auds = []string{one}
	} else if json.Unmarshal(c.Aud, &auds) != nil {
		return exp, "token has no aud claim"
	}
	if !slices.Contains(auds, a.audience) {
		return exp, fmt.Sprintf("token audiences %v do not include %s", auds, a.audience)
	}
	return exp, ""
}

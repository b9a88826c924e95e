// Package delegated is the aggregator's delegated authentication and
// authorization of HTTP and gRPC callers, the way k8s.io/apiserver's
// DelegatingAuthenticator and controller-runtime's
// filters.WithAuthenticationAndAuthorization do it: the caller's bearer
// token is checked with a TokenReview, and the user it names must be
// allowed a verb on a nonResourceURL by a SubjectAccessReview (e.g. a
// ClusterRole with `nonResourceURLs: ["/metrics"], verbs: ["get"]`).
//
// One Authorizer serves every front end (the drain check over HTTP and
// gRPC, /metrics): its decisions are cached by sha256(token) and path, good
// and bad, for a short TTL. A token that cannot be a live Kubernetes token
// (not a JWT, or its exp claim past) is refused without a review. The
// reviews of tokens not in the cache spend the caller's own budget (per
// source IP address) and then the replica's, so a flood of junk tokens
// costs the apiserver a bounded number of reviews per second, on a client
// that is not the one leader election renews its Lease with, and one
// client cannot spend what the scraper needs.
package delegated

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cozystack/cozy-health/aggregator/internal/peerlimit"
)

// Errors of Authorizer.Authorize.
var (
	// ErrUnauthenticated: no bearer token, or Kubernetes rejected it.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrForbidden: the user may not get the path.
	ErrForbidden = errors.New("forbidden")
	// ErrThrottled: the review budget is spent; nothing was asked.
	ErrThrottled = errors.New("too many token reviews: try again")
)

// Defaults of New.
const (
	DefaultTTL           = 10 * time.Second
	DefaultReviewsPerSec = 20
	DefaultReviewBurst   = 40
	// DefaultPeerReviewsPerSec and DefaultPeerReviewBurst are one source
	// address's share of the reviews: a scraper or a drain client needs
	// one per token and TTL; one address alone can spend at most a
	// twentieth of the replica's budget.
	DefaultPeerReviewsPerSec = 1
	DefaultPeerReviewBurst   = 5
	// maxTokenBytes bounds a token worth reviewing; a ServiceAccount
	// token is about 1 KiB.
	maxTokenBytes          = 16 << 10
	maxCachedDecisions     = 4096
	defaultReviewTimeout   = 10 * time.Second
	bearerScheme           = "bearer"
	wwwAuthenticateHeader  = `Bearer realm="cozy-health"`
	authorizationMetaField = "authorization"
)

// Authorizer checks bearer tokens against the apiserver. Safe for
// concurrent use.
type Authorizer struct {
	client kubernetes.Interface
	ttl    time.Duration
	now    func() time.Time
	limit  *rate.Limiter

	// peers is one review budget per source IP address.
	peers *peerlimit.Limiters
	// mu guards cache: sha256(path NUL token) -> decision, kept ttl.
	mu    sync.Mutex
	cache map[[32]byte]decision
}

type decision struct {
	user string
	err  error
	at   time.Time
}

// New returns an Authorizer asking client's apiserver. Decisions are cached
// for ttl (0: DefaultTTL); reviews of uncached tokens are limited to
// DefaultReviewsPerSec (burst DefaultReviewBurst).
func New(client kubernetes.Interface, ttl time.Duration) *Authorizer {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	return &Authorizer{client: client, ttl: ttl, now: time.Now, cache: map[[32]byte]decision{},
		limit: rate.NewLimiter(DefaultReviewsPerSec, DefaultReviewBurst),
		peers: peerlimit.New(DefaultPeerReviewsPerSec, DefaultPeerReviewBurst)}
}

// SetPeerRate changes each source address's review budget (tests, flags);
// buckets made before keep theirs.
func (a *Authorizer) SetPeerRate(perSecond float64, burst int) {
	a.peers.SetRate(rate.Limit(perSecond), burst)
}

// SetRate changes the review budget (tests, flags).
func (a *Authorizer) SetRate(perSecond float64, burst int) {
	a.limit.SetLimit(rate.Limit(perSecond))
	a.limit.SetBurst(burst)
}

// Reset forgets every cached decision (after an RBAC change, in tests).
func (a *Authorizer) Reset() {
	a.mu.Lock()
	defer a.mu.Unlock()
	clear(a.cache)
}

// BearerToken returns the token of an "Authorization: Bearer <token>" value.
func BearerToken(header string) string {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, bearerScheme) {
		return ""
	}
	return strings.TrimSpace(tok)
}

// Authorize checks that token authenticates and that its user may "get"
// the nonResourceURL path, and returns the user name. peer is the caller's
// address (host or host:port; empty: no budget of its own), whose budget a
// review spends before the replica's. The error wraps ErrUnauthenticated,
// ErrForbidden or ErrThrottled, or is the apiserver's failure (not cached).
func (a *Authorizer) Authorize(ctx context.Context, token, path, peer string) (string, error) {
	if token == "" {
		return "", fmt.Errorf("%w: no bearer token", ErrUnauthenticated)
	}
	key := sha256.Sum256([]byte(path + "\x00" + token))
	now := a.now()
	a.mu.Lock()
	if d, ok := a.cache[key]; ok && now.Sub(d.at) < a.ttl {
		a.mu.Unlock()
		return d.user, d.err
	}
	a.mu.Unlock()
	if detail := precheck(token, now); detail != "" {
		return "", fmt.Errorf("%w: %s", ErrUnauthenticated, detail)
	}
	// The caller's budget first: a flood from one address must not spend
	// the replica's budget the scraper needs.
	if !a.allowPeer(hostOf(peer), now) || !a.limit.AllowN(now, 1) {
		return "", ErrThrottled
	}
	rctx, cancel := context.WithTimeout(ctx, defaultReviewTimeout)
	defer cancel()
	user, err := a.review(rctx, token, path)
	if err != nil && !errors.Is(err, ErrUnauthenticated) && !errors.Is(err, ErrForbidden) {
		return "", err
	}
	a.mu.Lock()
	if len(a.cache) >= maxCachedDecisions {
		for k, d := range a.cache {
			if now.Sub(d.at) >= a.ttl {
				delete(a.cache, k)
			}
		}
		if len(a.cache) >= maxCachedDecisions {
			clear(a.cache)
		}
	}
	a.cache[key] = decision{user: user, err: err, at: now}
	a.mu.Unlock()
	return user, err
}

// allowPeer spends one review from ip's bucket (peerlimit.Limiters).
func (a *Authorizer) allowPeer(ip string, now time.Time) bool {
	return ip == "" || a.peers.Allow(ip, now)
}

// hostOf is the host of a host:port address, or addr itself.
func hostOf(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// precheck reads a token's claims without verifying it and says why it
// cannot be a live Kubernetes token (empty: it may be), as ingest does for
// agent tokens: ServiceAccount tokens (projected or legacy) and OIDC
// tokens are JWTs; a projected one carries exp. A token that passes is
// still reviewed. The audience is not checked: the apiserver's own
// audiences are not known here. Opaque tokens (a static token file, a
// webhook's) are refused: use a ServiceAccount or OIDC token.
func precheck(token string, now time.Time) string {
	parts := strings.Split(token, ".")
	if len(token) > maxTokenBytes || len(parts) != 3 {
		return "token is not a JWT"
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "token is not a JWT: payload is not base64url"
	}
	var c struct {
		Exp *float64 `json:"exp"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return "token is not a JWT: payload is not a JSON object"
	}
	// A legacy Secret-based ServiceAccount token has no exp.
	if c.Exp != nil {
		if exp := time.Unix(int64(*c.Exp), 0); !now.Before(exp) {
			return "token expired at " + exp.UTC().Format(time.RFC3339)
		}
	}
	return ""
}

func (a *Authorizer) review(ctx context.Context, token, path string) (string, error) {
	tr, err := a.client.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("create token review: %w", err)
	}
	if !tr.Status.Authenticated {
		return "", fmt.Errorf("%w: token rejected: %s", ErrUnauthenticated, tr.Status.Error)
	}
	u := tr.Status.User
	extra := map[string]authzv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	sar, err := a.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
		NonResourceAttributes: &authzv1.NonResourceAttributes{Path: path, Verb: "get"},
	}}, metav1.CreateOptions{})
	if err != nil {
		return u.Username, fmt.Errorf("create subject access review: %w", err)
	}
	if !sar.Status.Allowed {
		return u.Username, fmt.Errorf("%w: %s may not get %s: %s", ErrForbidden, u.Username, path, sar.Status.Reason)
	}
	return u.Username, nil
}

// Reject is called for every refused request with the reason
// (unauthenticated, forbidden, throttled, unavailable).
type Reject func(reason string, err error)

// Reasons of Reject.
const (
	ReasonUnauthenticated = "unauthenticated"
	ReasonForbidden       = "forbidden"
	ReasonThrottled       = "throttled"
	ReasonUnavailable     = "unavailable"
)

// ReasonOf maps an Authorize error to its Reject reason.
func ReasonOf(err error) string {
	switch {
	case errors.Is(err, ErrUnauthenticated):
		return ReasonUnauthenticated
	case errors.Is(err, ErrForbidden):
		return ReasonForbidden
	case errors.Is(err, ErrThrottled):
		return ReasonThrottled
	default:
		return ReasonUnavailable
	}
}

// Handler serves next only to callers allowed to get the request's path
// (a nonResourceURL: /metrics, /debug/pprof/...): 401 without a valid
// token, 403 when the SubjectAccessReview refuses, 429 when the review
// budget is spent, 503 when the apiserver cannot be asked. reject may be
// nil.
func (a *Authorizer) Handler(next http.Handler, reject Reject) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := a.Authorize(r.Context(), BearerToken(r.Header.Get("Authorization")), r.URL.Path, r.RemoteAddr)
		if err == nil {
			next.ServeHTTP(w, r)
			return
		}
		reason := ReasonOf(err)
		if reject != nil {
			reject(reason, err)
		}
		switch reason {
		case ReasonUnauthenticated:
			w.Header().Set("WWW-Authenticate", wwwAuthenticateHeader)
			http.Error(w, err.Error(), http.StatusUnauthorized)
		case ReasonForbidden:
			http.Error(w, err.Error(), http.StatusForbidden)
		case ReasonThrottled:
			w.Header().Set("Retry-After", "1")
			http.Error(w, err.Error(), http.StatusTooManyRequests)
		default:
			http.Error(w, "cannot authorize: "+err.Error(), http.StatusServiceUnavailable)
		}
	})
}

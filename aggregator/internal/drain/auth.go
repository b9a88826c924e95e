package drain

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Errors of Authorizer.Authorize.
var (
	// ErrUnauthenticated: no bearer token, or Kubernetes rejected it.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrForbidden: the user may not get the drain check.
	ErrForbidden = errors.New("forbidden")
)

// Path is the drain check's HTTP path, also the nonResourceURL its
// SubjectAccessReview asks about.
const Path = "/v1/drain-check"

// Authorizer is the optional delegated authentication and authorization of
// the drain check: the caller's bearer token is checked with a TokenReview,
// and the user must be allowed verb "get" on nonResourceURL /v1/drain-check
// (a SubjectAccessReview), e.g. through a ClusterRole with
// `nonResourceURLs: ["/v1/drain-check"], verbs: ["get"]`.
//
// Requests reaching the aggregator through the Kubernetes API service proxy
// carry no user token (the apiserver strips Authorization after
// authenticating the user, and authorizes services/proxy itself), so the
// delegated mode is for direct access; with it on, the service proxy path
// is refused.
type Authorizer struct {
	client kubernetes.Interface
	ttl    time.Duration
	now    func() time.Time

	// mu guards cache: sha256(token) -> decision, kept ttl.
	mu    sync.Mutex
	cache map[[32]byte]decision
}

type decision struct {
	user string
	err  error
	at   time.Time
}

// NewAuthorizer returns an Authorizer asking client's apiserver. Decisions
// are cached for ttl (0: 10s) to spare the apiserver.
func NewAuthorizer(client kubernetes.Interface, ttl time.Duration) *Authorizer {
	if ttl <= 0 {
		ttl = 10 * time.Second
	}
	return &Authorizer{client: client, ttl: ttl, now: time.Now, cache: map[[32]byte]decision{}}
}

// BearerToken returns the token of an "Authorization: Bearer <token>" value.
func BearerToken(header string) string {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return ""
	}
	return strings.TrimSpace(tok)
}

// Authorize checks token and returns the user name. The error wraps
// ErrUnauthenticated or ErrForbidden, or is the apiserver's failure.
func (a *Authorizer) Authorize(ctx context.Context, token string) (string, error) {
	if token == "" {
		return "", fmt.Errorf("%w: no bearer token", ErrUnauthenticated)
	}
	key := sha256.Sum256([]byte(token))
	now := a.now()
	a.mu.Lock()
	if d, ok := a.cache[key]; ok && now.Sub(d.at) < a.ttl {
		a.mu.Unlock()
		return d.user, d.err
	}
	a.mu.Unlock()

	user, err := a.review(ctx, token)
	if err != nil && !errors.Is(err, ErrUnauthenticated) && !errors.Is(err, ErrForbidden) {
		return "", err // apiserver trouble: not cached
	}
	a.mu.Lock()
	if len(a.cache) > 4096 {
		for k, d := range a.cache {
			if now.Sub(d.at) >= a.ttl {
				delete(a.cache, k)
			}
		}
	}
	a.cache[key] = decision{user: user, err: err, at: now}
	a.mu.Unlock()
	return user, err
}

func (a *Authorizer) review(ctx context.Context, token string) (string, error) {
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
		NonResourceAttributes: &authzv1.NonResourceAttributes{Path: Path, Verb: "get"},
	}}, metav1.CreateOptions{})
	if err != nil {
		return u.Username, fmt.Errorf("create subject access review: %w", err)
	}
	if !sar.Status.Allowed {
		return u.Username, fmt.Errorf("%w: %s may not get %s: %s", ErrForbidden, u.Username, Path, sar.Status.Reason)
	}
	return u.Username, nil
}

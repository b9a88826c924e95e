package drainserver

import (
	"context"

	"github.com/cozystack/cozy-health/aggregator/internal/delegated"
	"github.com/cozystack/cozy-health/pkg/drainapi"
)

// Path is the drain check's HTTP path, also the nonResourceURL its
// SubjectAccessReview asks about.
const Path = drainapi.Path

// Authorizer is the delegated authentication and authorization of the
// drain check (package delegated, the one implementation the aggregator
// uses for every authenticated front end): the caller's bearer token is
// checked with a TokenReview, and the user must be allowed verb "get" on
// nonResourceURL /v1/drain-check (a SubjectAccessReview), e.g. through a
// ClusterRole with `nonResourceURLs: ["/v1/drain-check"], verbs: ["get"]`.
//
// The gRPC DrainService always requires it. Over HTTP it is optional
// (--drain-auth): requests reaching the aggregator through the Kubernetes
// API service proxy carry no user token (the apiserver strips
// Authorization after authenticating the user, and authorizes
// services/proxy itself), so the delegated mode is for direct access; with
// it on, the service proxy path is refused.
type Authorizer struct {
	d *delegated.Authorizer
}

// NewAuthorizerFrom returns an Authorizer for the drain check on d (shared
// with the other front ends: one cache, one review budget).
func NewAuthorizerFrom(d *delegated.Authorizer) *Authorizer { return &Authorizer{d: d} }

// Authorize checks token of a caller at address peer (whose own review
// budget is spent first) and returns the user name. The error wraps
// delegated.ErrUnauthenticated (no bearer token, or Kubernetes rejected
// it), delegated.ErrForbidden (the user may not get the drain check) or
// delegated.ErrThrottled (the review budget is spent), or is the
// apiserver's failure.
func (a *Authorizer) Authorize(ctx context.Context, token, peer string) (string, error) {
	return a.d.Authorize(ctx, token, Path, peer)
}

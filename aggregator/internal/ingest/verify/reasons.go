package verify

// Rejection reasons: the values of the reason label of
// cozy_health_reports_rejected_total and of Ack.reject_reason.
const (
	// Report-stage reasons; the stream stays open.
	ReasonBadSignature     = "bad_signature"
	ReasonMissingSignature = "missing_signature"
	ReasonUnknownKey       = "unknown_key"
	ReasonNodeMismatch     = "node_mismatch"
	ReasonReplay           = "replay"
	ReasonSkew             = "skew"
	ReasonOversized        = "oversized"
	ReasonMalformed        = "malformed"
	ReasonRateLimited      = "rate_limited"
	// Stream-stage reasons (the Hello); the stream is closed. node_mismatch,
	// malformed, unknown_key and oversized can also happen here.
	ReasonUnauthenticated     = "unauthenticated"
	ReasonWrongServiceAccount = "wrong_service_account"
	ReasonNoHello             = "no_hello"
	// ReasonAuthUnavailable: the TokenReview itself failed (apiserver
	// unreachable); the agent retries.
	ReasonAuthUnavailable = "auth_unavailable"
	// ReasonTooManyStreams: the peer holds too many connections or streams
	// that have not said hello, or a second stream of one node arrived on
	// the connection that already carries it.
	ReasonTooManyStreams = "too_many_streams"
	// ReasonReviewThrottled: the TokenReview budget (per replica or per
	// peer) is spent; the agent retries.
	ReasonReviewThrottled = "review_throttled"
	// ReasonRevoked: an authenticated stream was closed because its token
	// expired or no longer passes a TokenReview (the pod is gone).
	ReasonRevoked = "revoked"
	// ReasonPeerAddressMismatch: the hello's token proves a node, but the
	// connection does not come from one of that Node's addresses (a copied
	// token used elsewhere).
	ReasonPeerAddressMismatch = "peer_address_mismatch"
	// ReasonCallTimeout: a call on the ingest port that is not an agent
	// stream (the drain check, gRPC health) did not finish within the
	// hello timeout: its request never arrived in full.
	ReasonCallTimeout = "call_timeout"
)

// Reasons lists every rejection reason; each is pre-initialised to 0.
var Reasons = []string{
	ReasonBadSignature, ReasonMissingSignature, ReasonUnknownKey, ReasonNodeMismatch, ReasonReplay, ReasonSkew,
	ReasonOversized, ReasonMalformed, ReasonRateLimited, ReasonUnauthenticated, ReasonWrongServiceAccount,
	ReasonNoHello, ReasonAuthUnavailable, ReasonTooManyStreams, ReasonReviewThrottled, ReasonRevoked,
	ReasonPeerAddressMismatch, ReasonCallTimeout,
}

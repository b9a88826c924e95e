package ingest

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cozystack/cozy-health/aggregator/internal/ingest/verify"
)

// Rejection reasons: the values of the reason label of
// cozy_health_reports_rejected_total and of Ack.reject_reason. The
// report-stage ones are decided in package verify.
const (
	ReasonBadSignature        = verify.ReasonBadSignature
	ReasonMissingSignature    = verify.ReasonMissingSignature
	ReasonUnknownKey          = verify.ReasonUnknownKey
	ReasonNodeMismatch        = verify.ReasonNodeMismatch
	ReasonReplay              = verify.ReasonReplay
	ReasonSkew                = verify.ReasonSkew
	ReasonOversized           = verify.ReasonOversized
	ReasonMalformed           = verify.ReasonMalformed
	ReasonRateLimited         = verify.ReasonRateLimited
	ReasonUnauthenticated     = verify.ReasonUnauthenticated
	ReasonWrongServiceAccount = verify.ReasonWrongServiceAccount
	ReasonNoHello             = verify.ReasonNoHello
	ReasonAuthUnavailable     = verify.ReasonAuthUnavailable
	ReasonTooManyStreams      = verify.ReasonTooManyStreams
	ReasonReviewThrottled     = verify.ReasonReviewThrottled
	ReasonRevoked             = verify.ReasonRevoked
	ReasonPeerAddressMismatch = verify.ReasonPeerAddressMismatch
	ReasonCallTimeout         = verify.ReasonCallTimeout
)

// Reasons lists every rejection reason; each is pre-initialised to 0.
var Reasons = verify.Reasons

// Token review result label values.
const (
	tokenReviewCached = "cached"
	tokenReviewCalled = "reviewed"
	tokenReviewError  = "error"
	// tokenReviewThrottled: refused before any apiserver call (rate
	// limit); tokenReviewShape: not a JWT for our audience, refused
	// without one.
	tokenReviewThrottled = "throttled"
	tokenReviewShape     = "malformed"
)

// metrics of ingest. received counts SignedReport messages; each is then
// either accepted or rejected with a report-stage reason, so
// received = accepted + rejected{report-stage reasons}. Stream-stage
// rejections (a bad Hello) are counted in rejected only.
type metrics struct {
	received     prometheus.Counter
	accepted     prometheus.Counter
	rejected     *prometheus.CounterVec
	streams      prometheus.Gauge
	tokenReviews *prometheus.CounterVec
	// pending counts streams that have not (yet) said a good hello;
	// replaced counts authenticated streams closed for a newer one of
	// the same node.
	pending  prometheus.Gauge
	replaced prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		received: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cozy_health_reports_received_total",
			Help: "Signed reports received on ingest streams, before any check.",
		}),
		accepted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cozy_health_reports_accepted_total",
			Help: "Reports that passed every check and were handed to the state.",
		}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cozy_health_reports_rejected_total",
			Help: "Reports and ingest streams rejected, by reason.",
		}, []string{"reason"}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cozy_health_ingest_streams",
			Help: "Authenticated agent streams open on this replica.",
		}),
		tokenReviews: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cozy_health_ingest_token_reviews_total",
			Help: "Agent token checks by result: cached (no apiserver call), reviewed (TokenReview called), error (TokenReview failed), throttled (over the TokenReview rate), malformed (not a JWT for our audience: no call).",
		}, []string{"result"}),
	}
	for _, r := range Reasons {
		m.rejected.WithLabelValues(r)
	}
	m.pending = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "cozy_health_ingest_pending_streams",
		Help: "Ingest streams open on this replica that have not been authenticated yet, and calls on the ingest port that are not agent streams (drain check, gRPC health) still running.",
	})
	m.replaced = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cozy_health_ingest_streams_replaced_total",
		Help: "Authenticated agent streams closed because a newer stream of the same node was authenticated.",
	})
	for _, r := range []string{tokenReviewCached, tokenReviewCalled, tokenReviewError, tokenReviewThrottled, tokenReviewShape} {
		m.tokenReviews.WithLabelValues(r)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.received, m.accepted, m.rejected, m.streams, m.tokenReviews, m.pending, m.replaced} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register ingest metrics: %w", err)
			}
		}
	}
	return m, nil
}

package ingest

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

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
)

// Reasons lists every rejection reason; each is pre-initialised to 0.
var Reasons = []string{
	ReasonBadSignature, ReasonMissingSignature, ReasonUnknownKey, ReasonNodeMismatch, ReasonReplay, ReasonSkew,
	ReasonOversized, ReasonMalformed, ReasonRateLimited, ReasonUnauthenticated, ReasonWrongServiceAccount,
	ReasonNoHello, ReasonAuthUnavailable,
}

// Token review result label values.
const (
	tokenReviewCached = "cached"
	tokenReviewCalled = "reviewed"
	tokenReviewError  = "error"
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
			Help: "Agent token checks by result: cached (no apiserver call), reviewed (TokenReview called), error (TokenReview failed).",
		}, []string{"result"}),
	}
	for _, r := range Reasons {
		m.rejected.WithLabelValues(r)
	}
	for _, r := range []string{tokenReviewCached, tokenReviewCalled, tokenReviewError} {
		m.tokenReviews.WithLabelValues(r)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.received, m.accepted, m.rejected, m.streams, m.tokenReviews} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register ingest metrics: %w", err)
			}
		}
	}
	return m, nil
}

// Package peers lets aggregator replicas relay to each other the signed
// reports of nodes some replica does not hear (issue 36: partial
// partitions). Every replica keeps the latest verified report of every
// node it hears, as the agent signed it (ingest.Latest); every report
// interval, each replica asks its peers (PeerService.LatestReports) for the
// nodes it has not heard directly for more than 1.5 report intervals, and
// stores what they return only after verifying it again itself:
//
//	oversized -> missing_signature -> unknown_key -> bad_signature ->
//	malformed -> node_mismatch -> skew -> replay
//
// The key is one this replica authenticated for that node itself (its own
// ingest saw the agent's Hello and TokenReview), or the key a peer
// forwards together with the agent's Hello token, which this replica then
// reviews itself (TokenReview: agents' audience and ServiceAccount, bound to
// a pod on that node). A peer never passes a summary: only the agent's
// exact signed bytes. A relayed report is stored with Entry.Via naming the
// peer (its --identity) and received at its own signed sent-at, never later
// than now; a report heard directly replaces it (state.AcceptVia).
//
// Callers of PeerService authenticate with the aggregator's own
// ServiceAccount token (a projected token for the agents' audience, bearer
// metadata), reviewed with a TokenReview whose user must be the
// aggregator's ServiceAccount; the call is admitted as every unary call on
// the ingest port is (ingest's Tap: pending-call bounds and the hello
// timeout). Every refusal, of a call or of a relayed report, is counted in
// cozy_health_peer_rejected_total{reason} and logged, sampled.
package peers

import (
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Rejection reasons of cozy_health_peer_rejected_total. The report-stage
// ones are ingest's (verify.Reasons) for the same checks.
const (
	ReasonOversized        = "oversized"
	ReasonMissingSignature = "missing_signature"
	ReasonUnknownKey       = "unknown_key"
	ReasonBadSignature     = "bad_signature"
	ReasonMalformed        = "malformed"
	ReasonNodeMismatch     = "node_mismatch"
	ReasonSkew             = "skew"
	ReasonReplay           = "replay"
	// Call-stage reasons: a caller of PeerService refused.
	ReasonUnauthenticated     = "unauthenticated"
	ReasonWrongServiceAccount = "wrong_service_account"
	ReasonReviewThrottled     = "review_throttled"
	ReasonAuthUnavailable     = "auth_unavailable"
	ReasonTooLarge            = "too_large"
)

// Reasons lists every reason; each is pre-initialised to 0.
var Reasons = []string{
	ReasonOversized, ReasonMissingSignature, ReasonUnknownKey, ReasonBadSignature, ReasonMalformed, ReasonNodeMismatch,
	ReasonSkew, ReasonReplay, ReasonUnauthenticated, ReasonWrongServiceAccount, ReasonReviewThrottled, ReasonAuthUnavailable,
	ReasonTooLarge,
}

// Metrics of the peer service and the sync loop.
type Metrics struct {
	// Rejected counts relayed reports and peer calls refused, by reason.
	Rejected *prometheus.CounterVec
	// Accepted counts relayed reports stored.
	Accepted prometheus.Counter
	// Calls counts this replica's calls to its peers by result (ok,
	// error, self).
	Calls *prometheus.CounterVec
	// Unheard is cozy_health_replica_unheard_nodes{replica}: the nodes
	// this replica holds only through a peer.
	Unheard *prometheus.GaugeVec
}

// NewMetrics registers the metrics on reg (nil: nowhere).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cozy_health_peer_rejected_total",
			Help: "Reports relayed by a peer replica and calls of peer replicas refused, by reason.",
		}, []string{"reason"}),
		Accepted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cozy_health_peer_reports_accepted_total",
			Help: "Reports relayed by a peer replica, verified again here and stored (for nodes this replica does not hear).",
		}),
		Calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cozy_health_peer_calls_total",
			Help: "This replica's calls to its peers for the reports of nodes it does not hear, by result (ok, error, self).",
		}, []string{"result"}),
		Unheard: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cozy_health_replica_unheard_nodes",
			Help: "Nodes this replica does not hear and holds only through a peer replica's relayed reports (a partial partition).",
		}, []string{"replica"}),
	}
	for _, r := range Reasons {
		m.Rejected.WithLabelValues(r)
	}
	for _, r := range []string{"ok", "error", "self"} {
		m.Calls.WithLabelValues(r)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.Rejected, m.Accepted, m.Calls, m.Unheard} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register peer metrics: %w", err)
			}
		}
	}
	return m, nil
}

// logLimiter logs one line per key and period; the rest are counted.
type logLimiter struct {
	period time.Duration
	mu     sync.Mutex // guards last, n
	last   map[string]time.Time
	n      map[string]int
}

func newLogLimiter(period time.Duration) *logLimiter {
	return &logLimiter{period: period, last: map[string]time.Time{}, n: map[string]int{}}
}

func (l *logLimiter) allow(key string, now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.last) > 4096 {
		clear(l.last)
		clear(l.n)
	}
	if t, ok := l.last[key]; ok && now.Sub(t) < l.period {
		l.n[key]++
		return false, 0
	}
	l.last[key] = now
	n := l.n[key]
	delete(l.n, key)
	return true, n
}

// reject counts and logs one refusal.
func reject(m *Metrics, logs *logLimiter, log *zap.Logger, now time.Time, reason, node, peer, detail string) {
	m.Rejected.WithLabelValues(reason).Inc()
	if ok, suppressed := logs.allow(reason+"\x00"+node+"\x00"+peer, now); ok {
		log.Warn("peer report or call rejected", zap.String("reason", reason), zap.String("node", node), zap.String("peer", peer),
			zap.String("detail", detail), zap.Int("suppressedSinceLast", suppressed))
	}
}

package ingest

import (
	"context"
	"errors"
	"sync"
	"time"

	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
)

// Latest is what this replica holds of one node for its peers (package
// peers): the key and token its agent's last good Hello presented here,
// and the latest report verified with that key. Replicas that do not hear
// the node verify the report again with it (issue 36: partial
// partitions). One per node, replaced by the node's next Hello and report,
// kept after its stream ends: a node cut from this replica after it was
// heard is still the node of the key this replica authenticated.
type Latest struct {
	Node     string
	Instance string
	KeyID    string
	// PublicKey is the agent's ed25519 key (32 bytes), bound to Node by
	// this replica's own TokenReview (or a listed development key).
	PublicKey []byte
	// Token is the Hello's token (empty for a development key): a peer
	// that never authenticated this agent reviews it itself.
	Token string
	// Report is the latest report accepted from this agent, exactly as
	// signed; nil until one is.
	Report *pb.SignedReport
	// Sequence is Report's sequence.
	Sequence uint64
	// ReceivedAt is when this replica accepted Report.
	ReceivedAt time.Time
}

// latestTable holds one Latest per node.
type latestTable struct {
	mu sync.RWMutex // guards m and every *Latest in it
	m  map[string]*Latest
}

// hello records the key an authenticated Hello bound to its node; a report
// of an earlier key or instance is forgotten.
func (t *latestTable) hello(node, instance, keyID string, pub []byte, token string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]*Latest{}
	}
	if l := t.m[node]; l != nil && l.KeyID == keyID && l.Instance == instance {
		l.Token = token
		return
	}
	t.m[node] = &Latest{Node: node, Instance: instance, KeyID: keyID, PublicKey: append([]byte(nil), pub...), Token: token}
}

// report records sr (sequence seq), accepted on a stream of node's
// instance and key.
func (t *latestTable) report(node, instance, keyID string, sr *pb.SignedReport, seq uint64, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.m[node]
	if l == nil || l.KeyID != keyID || l.Instance != instance || seq <= l.Sequence && l.Report != nil {
		return
	}
	// Only what was signed: the message's other fields are not kept.
	l.Report = &pb.SignedReport{Payload: sr.GetPayload(), KeyId: sr.GetKeyId(), Signature: sr.GetSignature()}
	l.Sequence, l.ReceivedAt = seq, at
}

// Latest returns a copy of what this replica holds of node: ok is false
// when no Hello of it was authenticated here. The report's bytes are
// shared and never changed.
func (s *Server) Latest(node string) (Latest, bool) {
	s.latest.mu.RLock()
	defer s.latest.mu.RUnlock()
	l := s.latest.m[node]
	if l == nil {
		return Latest{}, false
	}
	return *l, true
}

// Errors of ReviewAgentToken.
var (
	// ErrNoTokenReviews: this replica checks no tokens (development keys
	// only).
	ErrNoTokenReviews = errors.New("this replica has no TokenReview client")
	// ErrReviewThrottled: the TokenReview budget is spent; nothing was
	// asked.
	ErrReviewThrottled = errThrottled
)

// ReviewAgentToken checks an agent token a peer replica forwarded, as a
// Hello's token is checked here (TokenReview for the agents' audience and
// ServiceAccount, its verdicts cached, the replica's review budget spent;
// the peer's own bucket is keyed by peer): it returns the node the token
// is bound to, or a rejection reason and detail. err is set when no
// verdict could be had.
func (s *Server) ReviewAgentToken(ctx context.Context, token, peer string) (node, reason, detail string, err error) {
	if s.auth == nil {
		return "", "", "", ErrNoTokenReviews
	}
	id, err := s.auth.authenticate(ctx, token, peer)
	if err != nil {
		return "", "", "", err
	}
	return id.node, id.reason, id.detail, nil
}

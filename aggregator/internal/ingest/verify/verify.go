// Package verify decides, for one signed report received on an
// authenticated ingest stream, whether it is accepted: the report-stage
// checks, in this order (cheap checks first, so a flood costs little):
//
//	oversized -> rate_limited -> missing_signature -> unknown_key ->
//	bad_signature -> malformed -> node_mismatch -> skew -> replay
//
// It has no transport, Kubernetes or metrics dependencies, so the path can be
// fuzzed and benchmarked on its own; package ingest wraps it in the gRPC
// stream, authentication, metrics and logs.
package verify

import (
	"fmt"
	"time"

	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/pkg/signing"
	"github.com/cozystack/cozy-health/pkg/wire"
	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
)

// Session is what a stream's Hello established: the key bound to the node,
// and the agent instance speaking.
type Session struct {
	Node     string
	Key      *signing.VerifyKey
	KeyID    string
	Instance string
}

// Limits are the report-stage bounds.
type Limits struct {
	// MaxPayloadBytes bounds one serialized report.
	MaxPayloadBytes int
	// SkewWindow bounds |sent-at - now|.
	SkewWindow time.Duration
	// RatePerNode (reports per second) and RateBurst bound each node.
	RatePerNode float64
	RateBurst   int
}

// Verifier holds the per-node rate buckets and per-instance replay state of
// one replica. It is safe for concurrent use.
type Verifier struct {
	limits   Limits
	limiters *nodeLimiters
	replays  *replayGuard
}

// New returns a Verifier enforcing l.
func New(l Limits) *Verifier {
	return &Verifier{limits: l, limiters: newNodeLimiters(l.RatePerNode, l.RateBurst), replays: newReplayGuard(l.SkewWindow)}
}

// Verify runs every report-stage check on sr, received on the stream of
// sess, in the order of the package comment; if all pass it calls accept
// (under the instance's replay lock, so one instance's reports reach it in
// sequence order) and returns an empty reason. It returns the report's
// sequence when known, and the rejection reason and its detail otherwise.
// A rejected report changes nothing but the node's rate bucket.
func (c *Verifier) Verify(sess *Session, sr *pb.SignedReport, now time.Time, accept func(*report.NodeReport, time.Time)) (uint64, string, string) {
	if n := len(sr.GetPayload()); n > c.limits.MaxPayloadBytes {
		return 0, ReasonOversized, fmt.Sprintf("payload of %d bytes over the %d byte limit", n, c.limits.MaxPayloadBytes)
	}
	if !c.limiters.allow(sess.Node, now) {
		return 0, ReasonRateLimited, fmt.Sprintf("over %.3g reports/s (burst %d)", c.limits.RatePerNode, c.limits.RateBurst)
	}
	if len(sr.GetSignature()) == 0 {
		return 0, ReasonMissingSignature, "report is not signed"
	}
	if sr.GetKeyId() != sess.KeyID {
		return 0, ReasonUnknownKey, fmt.Sprintf("report key id %q is not the stream's key %s", sr.GetKeyId(), sess.KeyID)
	}
	if err := sess.Key.Verify(sr.GetPayload(), sr.GetSignature()); err != nil {
		return 0, ReasonBadSignature, err.Error()
	}
	// The generated reflection-free decoder (vtprotobuf): a third of the
	// cost of proto.Unmarshal. It does not check that strings are UTF-8;
	// ReportFromProto does.
	var p pb.NodeReport
	if err := p.UnmarshalVT(sr.GetPayload()); err != nil {
		return 0, ReasonMalformed, "decode report: " + err.Error()
	}
	r, err := wire.ReportFromProto(&p)
	if err != nil {
		return p.GetSequence(), ReasonMalformed, err.Error()
	}
	if r.NodeName != sess.Node {
		return r.Sequence, ReasonNodeMismatch, fmt.Sprintf("report for node %s on a stream bound to %s", r.NodeName, sess.Node)
	}
	if r.AgentInstanceID != sess.Instance {
		return r.Sequence, ReasonMalformed, fmt.Sprintf("report of agent instance %s on a stream of instance %s", r.AgentInstanceID, sess.Instance)
	}
	if d := now.Sub(r.SentAt); d > c.limits.SkewWindow || d < -c.limits.SkewWindow {
		return r.Sequence, ReasonSkew, fmt.Sprintf("sent at %s, %s from now, window %s", r.SentAt.Format(time.RFC3339Nano), d, c.limits.SkewWindow)
	}
	e := c.replays.entry(replayKey{node: sess.Node, keyID: sess.KeyID, instance: r.AgentInstanceID}, now)
	e.mu.Lock()
	defer e.mu.Unlock()
	if r.Sequence <= e.last {
		return r.Sequence, ReasonReplay, fmt.Sprintf("sequence %d not above the last accepted %d", r.Sequence, e.last)
	}
	accept(r, now)
	e.last = r.Sequence
	return r.Sequence, "", ""
}

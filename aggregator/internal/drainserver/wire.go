package drainserver

import (
	"fmt"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cozystack/cozy-health/aggregator/internal/drain"
	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
)

// verdictToProto converts a verdict to its wire form.
func verdictToProto(v drain.Verdict) pb.Verdict {
	switch v {
	case drain.Safe:
		return pb.Verdict_VERDICT_SAFE
	case drain.Blocked:
		return pb.Verdict_VERDICT_BLOCKED
	case drain.Unknown:
		return pb.Verdict_VERDICT_UNKNOWN
	}
	return pb.Verdict_VERDICT_UNSPECIFIED
}

// resultToProto converts a result to its wire form. It is the only place
// drain results become protobuf.
func resultToProto(r drain.Result) *pb.DrainCheckResponse {
	out := &pb.DrainCheckResponse{Node: r.Node, Verdict: verdictToProto(r.Verdict), EvaluatedAt: timestamppb.New(r.EvaluatedAt), Intent: intentToProto(r.Intent),
		Reasons: make([]*pb.DrainReason, 0, len(r.Reasons))}
	for _, rs := range r.Reasons {
		pr := &pb.DrainReason{Rule: rs.Rule, Component: rs.Component, Verdict: verdictToProto(rs.Verdict), Message: rs.Message, Attributes: rs.Attributes}
		if rs.ResourceRef != nil {
			pr.ResourceRef = &pb.ResourceRef{Kind: rs.ResourceRef.Kind, Name: rs.ResourceRef.Name, Namespace: rs.ResourceRef.Namespace}
		}
		out.Reasons = append(out.Reasons, pr)
	}
	return out
}

// intentFromProto converts a requested intent; unspecified is a reboot, a
// value this server does not know is an error.
func intentFromProto(i pb.DrainIntent) (drain.Intent, error) {
	switch i {
	case pb.DrainIntent_DRAIN_INTENT_UNSPECIFIED, pb.DrainIntent_DRAIN_INTENT_REBOOT:
		return drain.IntentReboot, nil
	case pb.DrainIntent_DRAIN_INTENT_DECOMMISSION:
		return drain.IntentDecommission, nil
	}
	return "", fmt.Errorf("intent %d: want DRAIN_INTENT_REBOOT or DRAIN_INTENT_DECOMMISSION", int32(i))
}

// intentToProto converts an intent to its wire form (empty: unspecified).
func intentToProto(i drain.Intent) pb.DrainIntent {
	switch i {
	case drain.IntentReboot:
		return pb.DrainIntent_DRAIN_INTENT_REBOOT
	case drain.IntentDecommission:
		return pb.DrainIntent_DRAIN_INTENT_DECOMMISSION
	}
	return pb.DrainIntent_DRAIN_INTENT_UNSPECIFIED
}

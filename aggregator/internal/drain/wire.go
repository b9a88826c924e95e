package drain

import (
	"fmt"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
)

// VerdictToProto converts a verdict to its wire form.
func VerdictToProto(v Verdict) pb.Verdict {
	switch v {
	case Safe:
		return pb.Verdict_VERDICT_SAFE
	case Blocked:
		return pb.Verdict_VERDICT_BLOCKED
	case Unknown:
		return pb.Verdict_VERDICT_UNKNOWN
	}
	return pb.Verdict_VERDICT_UNSPECIFIED
}

// ResultToProto converts a result to its wire form. It is the only place
// drain results become protobuf.
func ResultToProto(r Result) *pb.DrainCheckResponse {
	out := &pb.DrainCheckResponse{Node: r.Node, Verdict: VerdictToProto(r.Verdict), EvaluatedAt: timestamppb.New(r.EvaluatedAt), Intent: IntentToProto(r.Intent),
		Reasons: make([]*pb.DrainReason, 0, len(r.Reasons))}
	for _, rs := range r.Reasons {
		pr := &pb.DrainReason{Rule: rs.Rule, Component: rs.Component, Verdict: VerdictToProto(rs.Verdict), Message: rs.Message, Attributes: rs.Attributes}
		if rs.ResourceRef != nil {
			pr.ResourceRef = &pb.ResourceRef{Kind: rs.ResourceRef.Kind, Name: rs.ResourceRef.Name, Namespace: rs.ResourceRef.Namespace}
		}
		out.Reasons = append(out.Reasons, pr)
	}
	return out
}

// IntentFromProto converts a requested intent; unspecified is a reboot, a
// value this server does not know is an error.
func IntentFromProto(i pb.DrainIntent) (Intent, error) {
	switch i {
	case pb.DrainIntent_DRAIN_INTENT_UNSPECIFIED, pb.DrainIntent_DRAIN_INTENT_REBOOT:
		return IntentReboot, nil
	case pb.DrainIntent_DRAIN_INTENT_DECOMMISSION:
		return IntentDecommission, nil
	}
	return "", fmt.Errorf("intent %d: want DRAIN_INTENT_REBOOT or DRAIN_INTENT_DECOMMISSION", int32(i))
}

// IntentToProto converts an intent to its wire form (empty: unspecified).
func IntentToProto(i Intent) pb.DrainIntent {
	switch i {
	case IntentReboot:
		return pb.DrainIntent_DRAIN_INTENT_REBOOT
	case IntentDecommission:
		return pb.DrainIntent_DRAIN_INTENT_DECOMMISSION
	}
	return pb.DrainIntent_DRAIN_INTENT_UNSPECIFIED
}

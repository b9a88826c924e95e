package drain

import (
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
	out := &pb.DrainCheckResponse{Node: r.Node, Verdict: VerdictToProto(r.Verdict), EvaluatedAt: timestamppb.New(r.EvaluatedAt),
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

// Package wire converts between the domain types of pkg/report and the
// protobuf types of proto/cozyhealth/v1. It is the only place that does.
package wire

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cozystack/cozy-health/pkg/report"
	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
)

// StatusToProto converts a domain status to its wire form.
func StatusToProto(s report.Status) pb.Status {
	switch s {
	case report.StatusHealthy:
		return pb.Status_STATUS_HEALTHY
	case report.StatusDegraded:
		return pb.Status_STATUS_DEGRADED
	case report.StatusDown:
		return pb.Status_STATUS_DOWN
	default:
		return pb.Status_STATUS_UNKNOWN
	}
}

// StatusFromProto converts a wire status to its domain form. Unspecified and
// unrecognised values are an error: a report never defaults to a status.
func StatusFromProto(s pb.Status) (report.Status, error) {
	switch s {
	case pb.Status_STATUS_HEALTHY:
		return report.StatusHealthy, nil
	case pb.Status_STATUS_DEGRADED:
		return report.StatusDegraded, nil
	case pb.Status_STATUS_DOWN:
		return report.StatusDown, nil
	case pb.Status_STATUS_UNKNOWN:
		return report.StatusUnknown, nil
	}
	return report.StatusUnknown, fmt.Errorf("status %d is not a known status", int32(s))
}

// ReportToProto converts a node report to its wire form.
func ReportToProto(r *report.NodeReport) *pb.NodeReport {
	out := &pb.NodeReport{
		NodeName:        r.NodeName,
		AgentInstanceId: r.AgentInstanceID,
		Sequence:        r.Sequence,
		SentAt:          timestamppb.New(r.SentAt),
		Interval:        durationpb.New(r.Interval),
		AgentVersion:    r.AgentVersion,
		Observations:    make([]*pb.Observation, 0, len(r.Observations)),
	}
	for i := range r.Observations {
		o := &r.Observations[i]
		po := &pb.Observation{
			Component:  o.Component,
			Check:      o.Check,
			Status:     StatusToProto(o.Status),
			Reason:     o.Reason,
			Message:    o.Message,
			Attributes: o.Attributes,
		}
		if o.ResourceRef != nil {
			po.ResourceRef = &pb.ResourceRef{Kind: o.ResourceRef.Kind, Name: o.ResourceRef.Name, Namespace: o.ResourceRef.Namespace}
		}
		out.Observations = append(out.Observations, po)
	}
	return out
}

// validUTF8 checks every string of a report is UTF-8, as proto3 requires
// and proto.Unmarshal checks; a generated fast decoder (vtprotobuf) does
// not.
func validUTF8(p *pb.NodeReport) error {
	for _, f := range [...]struct{ name, v string }{
		{"node name", p.GetNodeName()}, {"agent instance id", p.GetAgentInstanceId()}, {"agent version", p.GetAgentVersion()},
	} {
		if !utf8.ValidString(f.v) {
			return fmt.Errorf("report %s is not UTF-8", f.name)
		}
	}
	for i, o := range p.GetObservations() {
		r := o.GetResourceRef()
		for _, v := range [...]string{o.GetComponent(), o.GetCheck(), o.GetReason(), o.GetMessage(), r.GetKind(), r.GetName(), r.GetNamespace()} {
			if !utf8.ValidString(v) {
				return fmt.Errorf("observation %d has a string that is not UTF-8", i)
			}
		}
		for k := range o.GetAttributes() {
			if !utf8.ValidString(k) {
				return fmt.Errorf("observation %d has an attribute name that is not UTF-8", i)
			}
		}
	}
	return nil
}

// ReportFromProto converts a wire report to its domain form and checks the
// fields every consumer relies on, and that every field is within
// report.Limits (NodeReport.CheckBounds).
func ReportFromProto(p *pb.NodeReport) (*report.NodeReport, error) {
	if p.GetNodeName() == "" {
		return nil, errors.New("report has no node name")
	}
	if p.GetAgentInstanceId() == "" {
		return nil, errors.New("report has no agent instance id")
	}
	if p.GetSentAt() == nil {
		return nil, errors.New("report has no sent-at")
	}
	if err := p.GetSentAt().CheckValid(); err != nil {
		return nil, fmt.Errorf("report sent-at: %w", err)
	}
	if p.GetInterval() == nil {
		return nil, errors.New("report has no interval")
	}
	if err := p.GetInterval().CheckValid(); err != nil {
		return nil, fmt.Errorf("report interval: %w", err)
	}
	if p.GetInterval().AsDuration() <= 0 {
		return nil, errors.New("report interval is not positive")
	}
	if err := validUTF8(p); err != nil {
		return nil, err
	}
	out := &report.NodeReport{
		NodeName:        p.GetNodeName(),
		AgentInstanceID: p.GetAgentInstanceId(),
		Sequence:        p.GetSequence(),
		SentAt:          p.GetSentAt().AsTime(),
		Interval:        p.GetInterval().AsDuration(),
		AgentVersion:    p.GetAgentVersion(),
		Observations:    make([]report.Observation, 0, len(p.GetObservations())),
	}
	// Consecutive observations of one resource (mostly the report's own
	// node) share one reference, and a reference to the node names it with
	// the report's own string: the aggregator keeps every node's report.
	var lastRef *report.ResourceRef
	for i, po := range p.GetObservations() {
		st, err := StatusFromProto(po.GetStatus())
		if err != nil {
			return nil, fmt.Errorf("observation %d (%s/%s): %w", i, po.GetComponent(), po.GetCheck(), err)
		}
		if po.GetComponent() == "" || po.GetCheck() == "" {
			return nil, fmt.Errorf("observation %d has no component or check", i)
		}
		o := report.Observation{
			Component:  po.GetComponent(),
			Check:      report.CurrentCheck(po.GetCheck()),
			Status:     st,
			Reason:     po.GetReason(),
			Message:    po.GetMessage(),
			Attributes: po.GetAttributes(),
		}
		if r := po.GetResourceRef(); r != nil {
			if lastRef == nil || lastRef.Kind != r.GetKind() || lastRef.Name != r.GetName() || lastRef.Namespace != r.GetNamespace() {
				name := r.GetName()
				if name == out.NodeName {
					name = out.NodeName
				}
				lastRef = &report.ResourceRef{Kind: r.GetKind(), Name: name, Namespace: r.GetNamespace()}
			}
			o.ResourceRef = lastRef
		}
		out.Observations = append(out.Observations, o)
	}
	// Every field within the Health CRD's bounds, so no observation can
	// make the apiserver refuse a component's whole status.
	if err := out.CheckBounds(); err != nil {
		return nil, fmt.Errorf("report out of bounds: %w", err)
	}
	return out, nil
}

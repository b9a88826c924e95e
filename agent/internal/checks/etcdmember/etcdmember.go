// Package etcdmember judges this node's etcd member as Talos and etcd see
// it: the Talos "etcd" service, EtcdStatus of the local member (leader,
// raft position, db size against the quota, errors) and its alarms.
package etcdmember

import (
	"context"
	"fmt"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"

	"github.com/cozystack/cozy-health/agent/internal/check"
	"github.com/cozystack/cozy-health/agent/internal/checks/talosservices"
	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/talos"
)

// Thresholds configure the check.
type Thresholds struct {
	// QuotaBytes is etcd's quota-backend-bytes.
	QuotaBytes int64
	// DegradedRatio of db size to quota makes the member Degraded.
	DegradedRatio float64
}

// Check is the etcd-member check.
type Check struct {
	talos *talos.Client
	th    Thresholds
}

var _ check.Check = (*Check)(nil)

// New returns the check.
func New(c *talos.Client, th Thresholds) *Check { return &Check{talos: c, th: th} }

// Name implements check.Check.
func (*Check) Name() string { return report.CheckEtcdMember }

// Component implements check.Check.
func (*Check) Component() string { return report.ComponentEtcd }

// Run implements check.Check.
func (c *Check) Run(ctx context.Context) ([]report.Observation, error) {
	svc, err := talosservices.RequireEtcd(ctx, c.talos)
	if err != nil {
		return nil, err
	}
	if st, reason := talosservices.ServiceStatus(svc); st == report.StatusDown {
		return []report.Observation{{Status: st, Reason: "Etcd" + reason, Message: talosservices.Describe(svc)}}, nil
	}
	st, err := c.talos.EtcdStatus(ctx)
	if err != nil {
		return nil, err
	}
	var alarms []*machine.EtcdMemberAlarm
	if st.GetLeader() != 0 && !st.GetIsLearner() {
		// The alarm list goes through raft: without a leader it fails, and
		// "no leader" is already the verdict. A learner does not serve it;
		// the voting members' etcd-alarms observations carry the alarms.
		if alarms, err = c.talos.EtcdAlarmList(ctx); err != nil {
			return nil, err
		}
	}
	return []report.Observation{Judge(svc, st, alarms, c.th)}, nil
}

// Judge turns the facts into the etcd-member observation.
func Judge(svc *machine.ServiceInfo, st *machine.EtcdMemberStatus, alarms []*machine.EtcdMemberAlarm, th Thresholds) report.Observation {
	attrs := map[string]float64{
		report.AttrMemberID:         float64(st.GetMemberId()),
		report.AttrIsLearner:        b2f(st.GetIsLearner()),
		report.AttrIsLeader:         b2f(st.GetLeader() != 0 && st.GetLeader() == st.GetMemberId()),
		report.AttrDBSizeBytes:      float64(st.GetDbSize()),
		report.AttrDBSizeInUseBytes: float64(st.GetDbSizeInUse()),
		report.AttrDBQuotaBytes:     float64(th.QuotaBytes),
		report.AttrRaftIndex:        float64(st.GetRaftIndex()),
		report.AttrRaftTerm:         float64(st.GetRaftTerm()),
	}
	id := fmt.Sprintf("%x", st.GetMemberId())
	o := report.Observation{Attributes: attrs}
	var own []string
	for _, a := range alarms {
		if a.GetMemberId() == st.GetMemberId() && a.GetAlarm() != machine.EtcdMemberAlarm_NONE {
			own = append(own, a.GetAlarm().String())
		}
	}
	ratio := float64(st.GetDbSize()) / float64(th.QuotaBytes)
	svcStatus, svcReason := talosservices.ServiceStatus(svc)
	if st.GetIsLearner() && talosservices.LearnerUnsupported(svc.GetHealth().GetLastMessage()) {
		// Talos' etcd health probe is a quorum read, which etcd refuses to
		// learners: until Talos promotes it, the member's own status is the
		// fact to judge.
		svcStatus = report.StatusHealthy
	}
	switch {
	case len(own) > 0:
		o.Status, o.Reason = report.StatusDown, "Alarm"+own[0]
		o.Message = fmt.Sprintf("member %s has alarm(s) %s", id, strings.Join(own, ", "))
	case st.GetLeader() == 0:
		o.Status, o.Reason = report.StatusDown, "NoLeader"
		o.Message = fmt.Sprintf("member %s knows no leader", id)
	case svcStatus == report.StatusDegraded:
		o.Status, o.Reason = report.StatusDown, "Etcd"+svcReason
		o.Message = fmt.Sprintf("member %s: %s", id, talosservices.Describe(svc))
	case len(st.GetErrors()) > 0:
		o.Status, o.Reason = report.StatusDegraded, "MemberErrors"
		o.Message = fmt.Sprintf("member %s reports errors: %s", id, strings.Join(st.GetErrors(), "; "))
	case ratio >= th.DegradedRatio:
		o.Status, o.Reason = report.StatusDegraded, "DBSizeNearQuota"
		o.Message = fmt.Sprintf("member %s db size %d bytes is %.0f%% of the %d-byte quota", id, st.GetDbSize(), ratio*100, th.QuotaBytes)
	default:
		o.Status, o.Reason = report.StatusHealthy, "MemberHealthy"
		role := "follower"
		switch {
		case st.GetIsLearner():
			o.Reason, role = "MemberLearner", "learner"
		case st.GetLeader() == st.GetMemberId():
			role = "leader"
		}
		o.Message = fmt.Sprintf("member %s is a %s, leader %x, raft index %d term %d, db %d bytes (%.0f%% of quota)",
			id, role, st.GetLeader(), st.GetRaftIndex(), st.GetRaftTerm(), st.GetDbSize(), ratio*100)
		if svcStatus == report.StatusUnknown {
			o.Message += "; Talos has no etcd health result yet"
		}
	}
	return o
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Package etcdmember judges this node's etcd member as Talos and etcd see
// it: the Talos "etcd" service, EtcdStatus of the local member (leader,
// raft position, db size against the quota, errors) and its alarms.
//
// The status says whether the member can vote, because the quorum rule
// (aggregator/internal/quorum) counts a member lost only when it cannot:
//
//   - Down: the member cannot vote or etcd refuses writes. NoLeader (it
//     knows no leader), EtcdServiceNotRunning / EtcdServiceUnhealthy
//     (Talos' etcd service is not running, or its quorum read fails), and
//     an alarm on the member: AlarmNOSPACE (the backend is full, etcd
//     refuses writes cluster-wide), AlarmCORRUPT.
//   - Degraded: the member votes but warns. DBSizeNearQuota (db size at or
//     above DegradedRatio of the quota) and MemberErrors (etcd lists errors
//     in its status). Capacity is not failure: etcd's db size is
//     replicated, so every member crosses the ratio together and the
//     cluster keeps its quorum.
//   - Healthy: MemberHealthy, MemberLearner (a learner does not vote).
//
// The quota is etcd's own: the etcd_server_quota_backend_bytes gauge on the
// metrics endpoint the fsync-latency check scrapes (one shared scrape, see
// etcdmetrics). The configured quota (--etcd-db-quota-bytes) is used only
// when that gauge cannot be read. Attribute AttrDBQuotaBytes is the quota
// used, AttrDBQuotaFromEtcd is 1 when it is etcd's own and 0 when it is
// the configured fallback, and the message names the source.
package etcdmember

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"

	"github.com/cozystack/cozy-health/agent/internal/checks/etcdcheck"
	"github.com/cozystack/cozy-health/agent/internal/sources/etcdmetrics"
	"github.com/cozystack/cozy-health/agent/internal/sources/machineapi"
	"github.com/cozystack/cozy-health/pkg/report"
)

// Thresholds configure the check.
type Thresholds struct {
	// QuotaBytes is the configured quota-backend-bytes, used only when
	// etcd's own etcd_server_quota_backend_bytes cannot be read.
	QuotaBytes int64
	// DegradedRatio of db size to quota makes the member Degraded.
	DegradedRatio float64
}

// Quota is the backend quota a member is judged against, and where it came
// from.
type Quota struct {
	// Bytes is the quota.
	Bytes int64
	// FromEtcd is true when Bytes is etcd's own gauge.
	FromEtcd bool
	// Source names where Bytes came from, for people.
	Source string
}

// ConfiguredQuota is the configured fallback quota; why says why etcd's own
// could not be used.
func ConfiguredQuota(bytes int64, why string) Quota {
	return Quota{Bytes: bytes, Source: "configured --etcd-db-quota-bytes; " + why}
}

// Check is the etcd-member check: the shared etcd skeleton reading the
// etcd service, EtcdStatus, the alarms and the quota.
type Check = etcdcheck.Check

// New returns the check; m (may be nil) reads etcd's quota from its
// metrics, shared with the fsync-latency check.
func New(c *machineapi.Client, m *etcdmetrics.Reader, th Thresholds) *Check {
	return etcdcheck.New(report.CheckEtcdMember, c, func(ctx context.Context, c *machineapi.Client, svc *machine.ServiceInfo) (report.Observation, error) {
		return read(ctx, c, svc, m, th)
	})
}

// ReadQuota reads etcd's quota gauge through m within at most half of ctx's
// remaining time (a hung metrics endpoint must not hide the member's
// verdict), falling back to configured.
func ReadQuota(ctx context.Context, m *etcdmetrics.Reader, configured int64) Quota {
	if m == nil || m.URL() == "" {
		return ConfiguredQuota(configured, "no etcd metrics URL")
	}
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Until(dl)/2)
		defer cancel()
	}
	fams, err := m.Read(ctx)
	if err != nil {
		// The fsync-latency observation carries the error in full.
		return ConfiguredQuota(configured, "etcd's metrics at "+m.URL()+" unreadable")
	}
	q, ok, why := etcdmetrics.Quota(fams)
	if !ok {
		return ConfiguredQuota(configured, why)
	}
	return Quota{Bytes: q, FromEtcd: true, Source: etcdmetrics.QuotaMetric}
}

// read judges the member once RequireEtcd found its service.
func read(ctx context.Context, c *machineapi.Client, svc *machine.ServiceInfo, m *etcdmetrics.Reader, th Thresholds) (report.Observation, error) {
	if st, reason := machineapi.JudgeService(svc); st == report.StatusDown {
		return report.Observation{Status: st, Reason: "Etcd" + reason, Message: machineapi.Describe(svc)}, nil
	}
	st, err := c.EtcdStatus(ctx)
	if err != nil {
		return report.Observation{}, err
	}
	var alarms []*machine.EtcdMemberAlarm
	if st.GetLeader() != 0 && !st.GetIsLearner() {
		// The alarm list goes through raft: without a leader it fails, and
		// "no leader" is already the verdict. A learner does not serve it;
		// the voting members' etcd-alarms observations carry the alarms.
		if alarms, err = c.EtcdAlarmList(ctx); err != nil {
			return report.Observation{}, err
		}
	}
	return Judge(svc, st, alarms, ReadQuota(ctx, m, th.QuotaBytes), th.DegradedRatio), nil
}

// Judge turns the facts into the etcd-member observation (the statuses are
// in the package comment). The db size is judged against q; degradedRatio
// of it makes the member Degraded.
func Judge(svc *machine.ServiceInfo, st *machine.EtcdMemberStatus, alarms []*machine.EtcdMemberAlarm, q Quota, degradedRatio float64) report.Observation {
	attrs := map[string]float64{
		report.AttrMemberID:         float64(st.GetMemberId()),
		report.AttrIsLearner:        b2f(st.GetIsLearner()),
		report.AttrIsLeader:         b2f(st.GetLeader() != 0 && st.GetLeader() == st.GetMemberId()),
		report.AttrDBSizeBytes:      float64(st.GetDbSize()),
		report.AttrDBSizeInUseBytes: float64(st.GetDbSizeInUse()),
		report.AttrDBQuotaBytes:     float64(q.Bytes),
		report.AttrDBQuotaFromEtcd:  b2f(q.FromEtcd),
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
	ratio := float64(st.GetDbSize()) / float64(q.Bytes)
	svcStatus, svcReason := machineapi.JudgeService(svc)
	if st.GetIsLearner() && machineapi.LearnerUnsupported(svc.GetHealth().GetLastMessage()) {
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
	case svcStatus == report.StatusDegraded || svcStatus == report.StatusDown:
		o.Status, o.Reason = report.StatusDown, "Etcd"+svcReason
		o.Message = fmt.Sprintf("member %s: %s", id, machineapi.Describe(svc))
	case len(st.GetErrors()) > 0:
		o.Status, o.Reason = report.StatusDegraded, "MemberErrors"
		o.Message = fmt.Sprintf("member %s reports errors: %s", id, strings.Join(st.GetErrors(), "; "))
	case ratio >= degradedRatio:
		o.Status, o.Reason = report.StatusDegraded, "DBSizeNearQuota"
		o.Message = fmt.Sprintf("member %s db size %d bytes is %.0f%% of the %d-byte quota (%s); it votes, writes stop at 100%%",
			id, st.GetDbSize(), ratio*100, q.Bytes, q.Source)
	default:
		o.Status, o.Reason = report.StatusHealthy, "MemberHealthy"
		role := "follower"
		switch {
		case st.GetIsLearner():
			o.Reason, role = "MemberLearner", "learner"
		case st.GetLeader() == st.GetMemberId():
			role = "leader"
		}
		o.Message = fmt.Sprintf("member %s is a %s, leader %x, raft index %d term %d, db %d bytes (%.0f%% of the %d-byte quota, %s)",
			id, role, st.GetLeader(), st.GetRaftIndex(), st.GetRaftTerm(), st.GetDbSize(), ratio*100, q.Bytes, q.Source)
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

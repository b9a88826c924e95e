package etcdmember

import (
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/stretchr/testify/assert"

	"github.com/cozystack/cozy-health/pkg/report"
)

// Judge's rules on the Talos shapes; the end-to-end path (real client,
// TLS, real etcd members) is in ../talos_test.go.
func TestJudge(t *testing.T) {
	running := &machine.ServiceInfo{Id: "etcd", State: "Running", Health: &machine.ServiceHealth{Healthy: true}}
	unhealthy := &machine.ServiceInfo{Id: "etcd", State: "Running", Health: &machine.ServiceHealth{Healthy: false, LastMessage: "quorum check failed"}}
	th := Thresholds{QuotaBytes: 1000, DegradedRatio: 0.8}
	st := func(mut func(*machine.EtcdMemberStatus)) *machine.EtcdMemberStatus {
		s := &machine.EtcdMemberStatus{MemberId: 7, Leader: 7, DbSize: 100, RaftIndex: 10, RaftTerm: 2}
		if mut != nil {
			mut(s)
		}
		return s
	}
	for name, tc := range map[string]struct {
		svc    *machine.ServiceInfo
		st     *machine.EtcdMemberStatus
		alarms []*machine.EtcdMemberAlarm
		status report.Status
		reason string
	}{
		"leader":         {running, st(nil), nil, report.StatusHealthy, "MemberHealthy"},
		"learner":        {running, st(func(s *machine.EtcdMemberStatus) { s.IsLearner, s.Leader = true, 3 }), nil, report.StatusHealthy, "MemberLearner"},
		"no leader":      {running, st(func(s *machine.EtcdMemberStatus) { s.Leader = 0 }), nil, report.StatusDown, "NoLeader"},
		"own NOSPACE":    {running, st(nil), []*machine.EtcdMemberAlarm{{MemberId: 7, Alarm: machine.EtcdMemberAlarm_NOSPACE}}, report.StatusDown, "AlarmNOSPACE"},
		"other's alarm":  {running, st(nil), []*machine.EtcdMemberAlarm{{MemberId: 9, Alarm: machine.EtcdMemberAlarm_CORRUPT}}, report.StatusHealthy, "MemberHealthy"},
		"unhealthy":      {unhealthy, st(nil), nil, report.StatusDown, "EtcdServiceUnhealthy"},
		"errors":         {running, st(func(s *machine.EtcdMemberStatus) { s.Errors = []string{"slow disk"} }), nil, report.StatusDegraded, "MemberErrors"},
		"db near quota":  {running, st(func(s *machine.EtcdMemberStatus) { s.DbSize = 850 }), nil, report.StatusDegraded, "DBSizeNearQuota"},
		"db under quota": {running, st(func(s *machine.EtcdMemberStatus) { s.DbSize = 790 }), nil, report.StatusHealthy, "MemberHealthy"},
	} {
		t.Run(name, func(t *testing.T) {
			o := Judge(tc.svc, tc.st, tc.alarms, th)
			assert.Equal(t, tc.status, o.Status, o.Message)
			assert.Equal(t, tc.reason, o.Reason)
			assert.Equal(t, 7.0, o.Attributes[report.AttrMemberID])
			assert.Equal(t, 1000.0, o.Attributes[report.AttrDBQuotaBytes])
		})
	}
	o := Judge(running, st(nil), nil, th)
	assert.Equal(t, 1.0, o.Attributes[report.AttrIsLeader])
	o = Judge(running, st(func(s *machine.EtcdMemberStatus) { s.Leader = 3 }), nil, th)
	assert.Equal(t, 0.0, o.Attributes[report.AttrIsLeader])
}

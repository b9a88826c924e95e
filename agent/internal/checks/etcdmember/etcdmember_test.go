package etcdmember

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/stretchr/testify/assert"

	"github.com/cozystack/cozy-health/agent/internal/sources/etcdmetrics"
	"github.com/cozystack/cozy-health/pkg/report"
)

// Judge's rules on the Talos shapes; the end-to-end path (real client,
// TLS, real etcd members) is in ../talos_test.go.
func TestJudge(t *testing.T) {
	running := &machine.ServiceInfo{Id: "etcd", State: "Running", Health: &machine.ServiceHealth{Healthy: true}}
	unhealthy := &machine.ServiceInfo{Id: "etcd", State: "Running", Health: &machine.ServiceHealth{Healthy: false, LastMessage: "quorum check failed"}}
	q := Quota{Bytes: 1000, FromEtcd: true, Source: "etcd_server_quota_backend_bytes"}
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
			o := Judge(tc.svc, tc.st, tc.alarms, q, 0.8)
			assert.Equal(t, tc.status, o.Status, o.Message)
			assert.Equal(t, tc.reason, o.Reason)
			assert.Equal(t, 7.0, o.Attributes[report.AttrMemberID])
			assert.Equal(t, 1000.0, o.Attributes[report.AttrDBQuotaBytes])
			assert.Equal(t, 1.0, o.Attributes[report.AttrDBQuotaFromEtcd])
		})
	}
	o := Judge(running, st(nil), nil, q, 0.8)
	assert.Equal(t, 1.0, o.Attributes[report.AttrIsLeader])
	o = Judge(running, st(func(s *machine.EtcdMemberStatus) { s.Leader = 3 }), nil, q, 0.8)
	assert.Equal(t, 0.0, o.Attributes[report.AttrIsLeader])
}

// TestStatusSemantics pins the contract the quorum rule reads: Down only
// when the member cannot vote or etcd refuses writes; a member that votes
// but warns is Degraded, never Down.
func TestStatusSemantics(t *testing.T) {
	running := &machine.ServiceInfo{Id: "etcd", State: "Running", Health: &machine.ServiceHealth{Healthy: true}}
	q := Quota{Bytes: 1000, FromEtcd: true, Source: "etcd_server_quota_backend_bytes"}
	nearQuotaWithErrors := &machine.EtcdMemberStatus{MemberId: 7, Leader: 7, DbSize: 990, Errors: []string{"slow disk"}}
	o := Judge(running, nearQuotaWithErrors, nil, q, 0.8)
	assert.Equal(t, report.StatusDegraded, o.Status, "errors and a db near quota still vote")
	full := &machine.EtcdMemberStatus{MemberId: 7, Leader: 7, DbSize: 1000}
	o = Judge(running, full, []*machine.EtcdMemberAlarm{{MemberId: 7, Alarm: machine.EtcdMemberAlarm_NOSPACE}}, q, 0.8)
	assert.Equal(t, report.StatusDown, o.Status)
	assert.Equal(t, "AlarmNOSPACE", o.Reason)
	stopped := &machine.ServiceInfo{Id: "etcd", State: "Failed"}
	o = Judge(stopped, full, nil, q, 0.8)
	assert.Equal(t, report.StatusDown, o.Status)
}

// TestQuotaSource: the quota is etcd's own gauge; the configured one only
// when the gauge cannot be read, and the observation says which.
func TestQuotaSource(t *testing.T) {
	const eightGiB = 8 << 30
	etcd := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		// etcd v3.6's exposition of the gauge (server/storage/metrics.go).
		_, _ = io.WriteString(w, "# HELP etcd_server_quota_backend_bytes Current backend storage quota size in bytes.\n"+
			"# TYPE etcd_server_quota_backend_bytes gauge\netcd_server_quota_backend_bytes 8.589934592e+09\n")
	}))
	defer etcd.Close()
	noGauge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "# TYPE etcd_server_has_leader gauge\netcd_server_has_leader 1\n")
	}))
	defer noGauge.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()

	q := ReadQuota(ctx, etcdmetrics.New(etcd.URL, 0), 2<<30)
	assert.Equal(t, Quota{Bytes: eightGiB, FromEtcd: true, Source: "etcd_server_quota_backend_bytes"}, q)
	// 1.7 GiB is 85 % of the chart's 2 GiB but 21 % of etcd's own 8 GiB
	// (Cozystack's talm preset): Healthy.
	running := &machine.ServiceInfo{Id: "etcd", State: "Running", Health: &machine.ServiceHealth{Healthy: true}}
	st := &machine.EtcdMemberStatus{MemberId: 7, Leader: 7, DbSize: 1700 << 20}
	o := Judge(running, st, nil, q, 0.8)
	assert.Equal(t, report.StatusHealthy, o.Status, o.Message)
	assert.Equal(t, float64(eightGiB), o.Attributes[report.AttrDBQuotaBytes])
	assert.Equal(t, 1.0, o.Attributes[report.AttrDBQuotaFromEtcd])
	assert.Contains(t, o.Message, "etcd_server_quota_backend_bytes")

	for name, m := range map[string]*etcdmetrics.Reader{
		"no URL":          etcdmetrics.New("", 0),
		"nil reader":      nil,
		"gauge absent":    etcdmetrics.New(noGauge.URL, 0),
		"nothing listens": etcdmetrics.New("http://127.0.0.1:1/metrics", 0),
	} {
		q := ReadQuota(ctx, m, 2<<30)
		assert.Equal(t, int64(2<<30), q.Bytes, name)
		assert.False(t, q.FromEtcd, name)
		assert.Contains(t, q.Source, "configured --etcd-db-quota-bytes", name)
		o := Judge(running, st, nil, q, 0.8)
		assert.Equal(t, report.StatusDegraded, o.Status, name)
		assert.Equal(t, 0.0, o.Attributes[report.AttrDBQuotaFromEtcd], name)
		assert.Contains(t, o.Message, "configured --etcd-db-quota-bytes", name)
	}
}

package wire

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/pkg/report"
	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
)

func TestReportRoundTrip(t *testing.T) {
	in := &report.NodeReport{
		NodeName: "cp1", AgentInstanceID: "abc", Sequence: 7,
		SentAt: time.Unix(1700000000, 5).UTC(), Interval: 5 * time.Second, AgentVersion: "v0",
		Observations: []report.Observation{
			{Component: report.ComponentEtcd, Check: "etcd-status", Status: report.StatusDegraded, Reason: "DBNearQuota",
				Message: "db 1.9 GiB of 2 GiB", Attributes: map[string]float64{"dbSizeBytes": 2e9}},
			{Component: report.ComponentLinstor, Check: "linstor", Status: report.StatusDown, Reason: "Outdated",
				ResourceRef: &report.ResourceRef{Kind: "Resource", Name: "pvc-1"}},
			{Component: report.ComponentDisk, Check: "fsync-probe", Status: report.StatusUnknown, Reason: report.ReasonCheckTimeout},
		},
	}
	out, err := ReportFromProto(ReportToProto(in))
	require.NoError(t, err)
	assert.Equal(t, in, out)
}

func TestReportFromProtoRejects(t *testing.T) {
	good := func() *pb.NodeReport {
		return ReportToProto(&report.NodeReport{NodeName: "n", AgentInstanceID: "i", SentAt: time.Now(), Interval: time.Second})
	}
	cases := map[string]func(*pb.NodeReport){
		"no node":       func(p *pb.NodeReport) { p.NodeName = "" },
		"no instance":   func(p *pb.NodeReport) { p.AgentInstanceId = "" },
		"no sent-at":    func(p *pb.NodeReport) { p.SentAt = nil },
		"no interval":   func(p *pb.NodeReport) { p.Interval = nil },
		"zero interval": func(p *pb.NodeReport) { p.Interval.Seconds = 0 },
		"unspecified":   func(p *pb.NodeReport) { p.Observations = []*pb.Observation{{Component: "etcd", Check: "x"}} },
		"bad enum": func(p *pb.NodeReport) {
			p.Observations = []*pb.Observation{{Component: "etcd", Check: "x", Status: 42}}
		},
		"no component": func(p *pb.NodeReport) {
			p.Observations = []*pb.Observation{{Check: "x", Status: pb.Status_STATUS_HEALTHY}}
		},
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			p := good()
			_, err := ReportFromProto(p)
			require.NoError(t, err)
			mutate(p)
			_, err = ReportFromProto(p)
			assert.Error(t, err)
		})
	}
}

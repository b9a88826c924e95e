package wire

import (
	"bytes"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

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

// TestFastDecodeMatchesProto: the generated decoder the aggregator uses
// (UnmarshalVT) plus ReportFromProto accepts exactly what proto.Unmarshal
// plus ReportFromProto accepts, and gives the same report; strings that
// are not UTF-8, which UnmarshalVT does not check, are refused by
// ReportFromProto.
func TestFastDecodeMatchesProto(t *testing.T) {
	in := ReportToProto(&report.NodeReport{
		NodeName: "cp1", AgentInstanceID: "abc", Sequence: 7, SentAt: time.Unix(1700000000, 5).UTC(), Interval: 5 * time.Second,
		Observations: []report.Observation{{Component: report.ComponentLinstor, Check: "drbd-resource", Status: report.StatusDegraded, Reason: "Outdated",
			Message: "resource pvc-1 Outdated", ResourceRef: &report.ResourceRef{Kind: "Resource", Name: "pvc-1"}, Attributes: map[string]float64{"upToDate": 0}}},
	})
	good, err := proto.Marshal(in)
	require.NoError(t, err)
	decode := func(b []byte) (fast, slow *report.NodeReport, fastErr, slowErr error) {
		var f, s pb.NodeReport
		if fastErr = f.UnmarshalVT(b); fastErr == nil {
			fast, fastErr = ReportFromProto(&f)
		}
		if slowErr = proto.Unmarshal(b, &s); slowErr == nil {
			slow, slowErr = ReportFromProto(&s)
		}
		return
	}
	fast, slow, fe, se := decode(good)
	require.NoError(t, fe)
	require.NoError(t, se)
	assert.Equal(t, slow, fast)

	for name, b := range map[string][]byte{
		"message not UTF-8":   replaceOnce(good, []byte("resource pvc-1"), []byte("resource pvc-\xf0")),
		"truncated":           good[:len(good)-3],
		"bad wire type":       append(append([]byte{}, good...), 0x0f),
		"resource not UTF-8":  replaceOnce(good, []byte("pvc-1"), []byte("pvc-\xff")),
		"reason not UTF-8":    replaceOnce(good, []byte("Outdated"), []byte("Outdate\xc3")),
		"attribute not UTF-8": replaceOnce(good, []byte("upToDate"), []byte("upToDat\xe2")),
	} {
		require.NotNil(t, b, name)
		_, _, fe, se := decode(b)
		assert.Error(t, se, "%s: proto refuses it", name)
		assert.Error(t, fe, "%s: the fast path must refuse it too", name)
	}
}

// replaceOnce replaces the first old in b by new (same length); nil when
// old is absent.
func replaceOnce(b, old, new []byte) []byte {
	if new == nil || len(old) != len(new) {
		return nil
	}
	i := bytes.Index(b, old)
	if i < 0 {
		return nil
	}
	out := append([]byte{}, b...)
	copy(out[i:], new)
	return out
}

// A report's observations of its own node share one reference (the
// aggregator keeps 5,000 reports), whose name is the report's node name;
// equality with the input is unchanged.
func TestReportFromProtoSharesTheNodeRef(t *testing.T) {
	nodeRef := &report.ResourceRef{Kind: report.KindNode, Name: "cp1"}
	in := &report.NodeReport{
		NodeName: "cp1", AgentInstanceID: "abc", Sequence: 1, SentAt: time.Unix(1700000000, 0).UTC(), Interval: time.Second, AgentVersion: "v1",
		Observations: []report.Observation{
			{Component: report.ComponentEtcd, Check: report.CheckEtcdMember, Status: report.StatusHealthy, Reason: "MemberHealthy", ResourceRef: nodeRef},
			{Component: report.ComponentNode, Check: report.CheckTalosServices, Status: report.StatusHealthy, Reason: "ServicesRunning", ResourceRef: nodeRef},
			{Component: report.ComponentLinstor, Check: report.CheckDRBDResource, Status: report.StatusHealthy, Reason: "UpToDate",
				ResourceRef: &report.ResourceRef{Kind: report.KindResource, Name: "pvc-1"}},
			{Component: report.ComponentNode, Check: "other", Status: report.StatusHealthy, Reason: "Fine", ResourceRef: nodeRef},
		},
	}
	data, err := proto.Marshal(ReportToProto(in))
	require.NoError(t, err)
	var p pb.NodeReport
	require.NoError(t, p.UnmarshalVT(data))
	out, err := ReportFromProto(&p)
	require.NoError(t, err)
	assert.Equal(t, in, out)
	refs := []*report.ResourceRef{out.Observations[0].ResourceRef, out.Observations[1].ResourceRef, out.Observations[2].ResourceRef, out.Observations[3].ResourceRef}
	assert.Same(t, refs[0], refs[1], "consecutive observations of the node share its reference")
	assert.NotSame(t, refs[1], refs[2])
	assert.Equal(t, unsafe.StringData(out.NodeName), unsafe.StringData(refs[0].Name), "the reference names the node with the report's own string")
	assert.Equal(t, unsafe.StringData(out.NodeName), unsafe.StringData(refs[3].Name))
}

// An agent of 0.1.0 sends the Cilium agent's check under its old name,
// "cilium-health"; the aggregator reads it as cilium-agent, so a rolling
// upgrade keeps one CiliumAgent condition. Current names pass unchanged,
// and no old name is a current check's name.
func TestReportFromProtoRenamesOldChecks(t *testing.T) {
	nodeRef := &report.ResourceRef{Kind: report.KindNode, Name: "cp1"}
	in := &report.NodeReport{
		NodeName: "cp1", AgentInstanceID: "abc", Sequence: 1, SentAt: time.Unix(1700000000, 0).UTC(), Interval: time.Second, AgentVersion: "0.1.0",
		Observations: []report.Observation{
			{Component: report.ComponentCilium, Check: "cilium-health", Status: report.StatusDown, Reason: "AgentFailure", ResourceRef: nodeRef},
			{Component: report.ComponentCilium, Check: report.CheckCiliumNodeConnectivity, Status: report.StatusHealthy, Reason: "AllNodesReachable", ResourceRef: nodeRef},
		},
	}
	out, err := ReportFromProto(ReportToProto(in))
	require.NoError(t, err)
	assert.Equal(t, report.CheckCiliumAgent, out.Observations[0].Check)
	assert.Equal(t, "cilium-agent", out.Observations[0].Check)
	assert.Equal(t, report.CheckCiliumNodeConnectivity, out.Observations[1].Check)
	for old, now := range report.RenamedChecks {
		assert.NotEqual(t, old, now)
		assert.NotEqual(t, old, report.CurrentCheck(old))
		assert.Equal(t, now, report.CurrentCheck(now), "a new name is not renamed again")
	}
}

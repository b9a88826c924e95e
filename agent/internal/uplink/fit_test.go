package uplink

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/pkg/wire"
	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
)

// TestPublishFitsTheBudget: a node holding 3,000 DRBD resources made a
// report of about 1 MiB, over the aggregators' 256 KiB payload limit, so
// every report was refused and the node read Unknown. The uplink folds it
// into the budget before signing: the signed payload fits, decodes within
// report.Limits, keeps the Down resource, and the folding is counted.
func TestPublishFitsTheBudget(t *testing.T) {
	l := newLab(t)
	reg := prometheus.NewRegistry()
	u, err := New(Config{Aggregators: []string{"127.0.0.1:1"}, CAFile: l.files.CAFile, NodeName: "cp1", TokenFile: "/nonexistent", Registerer: reg}, zaptest.NewLogger(t))
	require.NoError(t, err)
	in := &report.NodeReport{Interval: 5 * time.Second}
	for i := range 3000 {
		name := fmt.Sprintf("pvc-%08x-1c2d-4e5f-8a9b-%012x", i, i)
		o := report.Observation{Component: report.ComponentLinstor, Check: report.CheckDRBDResource, Status: report.StatusHealthy, Reason: "DiskUpToDate",
			ResourceRef: &report.ResourceRef{Kind: report.KindResource, Name: name},
			Attributes:  map[string]float64{report.AttrUpToDate: 1, report.AttrDiskless: 0, report.AttrReplicas: 3, report.AttrUpToDateReplicas: 3},
			Message:     fmt.Sprintf("resource %s on cp1: disk UpToDate (from drbdsetup); 3 of 3 replica(s) UpToDate, cluster-wide as LINSTOR sees it", name)}
		if i == 1234 {
			o.Status, o.Reason = report.StatusDown, "DiskFailed"
		}
		in.Observations = append(in.Observations, o)
	}
	u.Publish(in)
	p := u.latest.Load()
	require.NotNil(t, p)
	assert.LessOrEqual(t, len(p.sr.GetPayload()), report.MaxReportBytes)
	var w pb.NodeReport
	require.NoError(t, w.UnmarshalVT(p.sr.GetPayload()))
	r, err := wire.ReportFromProto(&w)
	require.NoError(t, err)
	var down, folded int
	for _, o := range r.Observations {
		if o.Status == report.StatusDown && o.ResourceRef != nil && o.ResourceRef.Name == fmt.Sprintf("pvc-%08x-1c2d-4e5f-8a9b-%012x", 1234, 1234) {
			down++
		}
		folded += int(o.Attributes[report.AttrFolded])
	}
	assert.Equal(t, 1, down, "the Down resource is kept verbatim")
	assert.Positive(t, folded)
	assert.Equal(t, float64(folded), testutil.ToFloat64(u.m.folded))
	assert.Equal(t, float64(len(p.sr.GetPayload())), testutil.ToFloat64(u.m.reportBytes))
	assert.Equal(t, 3000, len(in.Observations), "the caller's report is not changed")
}

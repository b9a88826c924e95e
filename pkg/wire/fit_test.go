package wire

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/cozystack/cozy-health/pkg/report"
)

// drbdReport is a report as the agent sends it from a node holding n DRBD
// resources (the drbd-resource check's observations, message and
// attributes as it writes them), of which the ones in down are Down.
func drbdReport(n int, down map[int]bool) *report.NodeReport {
	r := &report.NodeReport{NodeName: "worker-17", AgentInstanceID: "0123456789abcdef0123456789abcdef", Sequence: 1,
		SentAt: time.Unix(1_800_000_000, 0), Interval: 5 * time.Second, AgentVersion: "v0.3.0"}
	r.Observations = append(r.Observations, report.Observation{Component: report.ComponentNode, Check: report.CheckTalosServices,
		Status: report.StatusHealthy, Reason: "ServicesHealthy", Message: "etcd, kubelet, cri running and healthy",
		ResourceRef: &report.ResourceRef{Kind: report.KindNode, Name: "worker-17"}})
	for i := range n {
		name := fmt.Sprintf("pvc-%08x-1c2d-4e5f-8a9b-%012x", i, i*7919)
		o := report.Observation{Component: report.ComponentLinstor, Check: report.CheckDRBDResource, Status: report.StatusHealthy, Reason: "DiskUpToDate",
			ResourceRef: &report.ResourceRef{Kind: report.KindResource, Name: name},
			Attributes:  map[string]float64{report.AttrUpToDate: 1, report.AttrDiskless: 0, report.AttrReplicas: 3, report.AttrUpToDateReplicas: 3},
			Message:     fmt.Sprintf("resource %s on worker-17: disk UpToDate (from drbdsetup); 3 of 3 replica(s) UpToDate, cluster-wide as LINSTOR sees it", name)}
		if down[i] {
			o.Status, o.Reason = report.StatusDown, "DiskFailed"
			o.Attributes[report.AttrUpToDate], o.Attributes[report.AttrUpToDateReplicas] = 0, 2
		}
		r.Observations = append(r.Observations, o)
	}
	return r
}

func size(r *report.NodeReport) int { return proto.Size(ReportToProto(r)) }

// maxFitting is the largest n whose report fits the budget after f.
func maxFitting(f func(*report.NodeReport) *report.NodeReport) int {
	lo, hi := 0, 20000
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if size(f(drbdReport(mid, nil))) <= report.MaxReportBytes {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// TestFitDRBDPastTheBudget: past about 750 DRBD resources a report was
// over the 256 KiB budget and every one was refused, so the node read
// Unknown. Fit keeps it within the budget and within report.Limits, keeps
// the Down resources verbatim, and never makes a check's worst status
// greener.
func TestFitDRBDPastTheBudget(t *testing.T) {
	raw := maxFitting(func(r *report.NodeReport) *report.NodeReport { return r })
	stripped := maxFitting(func(r *report.NodeReport) *report.NodeReport {
		f, res := Fit(r, report.MaxReportBytes)
		if res.Folded > 0 {
			return drbdReport(20000, nil) // does not count: folded
		}
		return f
	})
	t.Logf("DRBD resources in one report: %d as sent, %d without folding once healthy messages are left out", raw, stripped)
	assert.Less(t, raw, 800, "the reproduction: about 750 resources fill 256 KiB")
	assert.Greater(t, stripped, 2*raw-200, "leaving out healthy messages alone nearly doubles it")

	for _, n := range []int{raw + 1, 3000, 10000} {
		down := map[int]bool{7: true, n / 2: true, n - 1: true}
		in := drbdReport(n, down)
		require.Greater(t, size(in), report.MaxReportBytes)
		out, res := Fit(in, report.MaxReportBytes)
		assert.LessOrEqual(t, res.Bytes, report.MaxReportBytes, "n=%d", n)
		assert.Equal(t, size(out), res.Bytes)
		require.NoError(t, out.CheckBounds(), "n=%d", n)
		assert.Equal(t, n+1, len(in.Observations), "the input is not modified")
		// The Down resources are kept verbatim; the check's worst status
		// stays Down; whatever is folded is summarised, at least Unknown.
		var downKept int
		worst := report.StatusHealthy
		folded := 0
		for _, o := range out.Observations {
			if o.Check != report.CheckDRBDResource {
				continue
			}
			worst = report.Worse(worst, o.Status)
			if o.Status == report.StatusDown && o.ResourceRef != nil {
				downKept++
			}
			if o.Reason == report.ReasonObservationsFolded {
				folded += int(o.Attributes[report.AttrFolded])
				assert.Nil(t, o.ResourceRef)
				assert.Equal(t, report.StatusUnknown, o.Status, "what is folded is not known Healthy")
				assert.Equal(t, o.Attributes[report.AttrFolded], o.Attributes[report.AttrFoldedHealthy], "only healthy ones are folded: the Down are kept")
			}
		}
		assert.Equal(t, 3, downKept, "n=%d", n)
		assert.Equal(t, report.StatusDown, worst)
		assert.Equal(t, res.Folded, folded)
		if n <= stripped {
			assert.Zero(t, res.Folded, "n=%d fits without folding", n)
		} else {
			assert.Positive(t, res.Folded, "n=%d", n)
		}
		t.Logf("n=%d: %d bytes, %d observations kept, %d folded, %d messages left out", n, res.Bytes, len(out.Observations), res.Folded, res.Stripped)
	}

	// A report within the budget is sent as it is.
	small := drbdReport(10, nil)
	out, res := Fit(small, report.MaxReportBytes)
	assert.Equal(t, small.Observations, out.Observations)
	assert.Equal(t, FitResult{Bytes: size(small)}, res)
}

// TestFitFoldsTheWorstLast: with a budget that holds only some of a
// check's observations, the worst are kept (Down, then Degraded, then
// Unknown) in their order, the summary carries the worst of what it folds
// and at least Unknown.
func TestFitFoldsTheWorstLast(t *testing.T) {
	r := drbdReport(400, map[int]bool{3: true})
	r.Observations[100].Status, r.Observations[100].Reason = report.StatusDegraded, "DiskOutdated"
	r.Observations[200].Status, r.Observations[200].Reason = report.StatusUnknown, "DiskStateUnknown"
	out, res := Fit(r, 8<<10)
	require.LessOrEqual(t, res.Bytes, 8<<10)
	kept := map[report.Status]int{}
	for _, o := range out.Observations[1:] {
		if o.ResourceRef != nil {
			kept[o.Status]++
		}
	}
	assert.Equal(t, 1, kept[report.StatusDown])
	assert.Equal(t, 1, kept[report.StatusDegraded])
	assert.Equal(t, 1, kept[report.StatusUnknown], "the worst are kept verbatim, whatever their place")
	assert.Positive(t, res.Folded)
	assert.Equal(t, 401, len(out.Observations)-1+res.Folded, "kept + folded + the summary = all")
	last := out.Observations[len(out.Observations)-1]
	assert.Equal(t, report.ReasonObservationsFolded, last.Reason)
	assert.Equal(t, report.StatusUnknown, last.Status)
	assert.Equal(t, float64(res.Folded), last.Attributes[report.AttrFolded])
}

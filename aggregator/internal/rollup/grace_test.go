package rollup

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/cozystack/cozy-health/aggregator/internal/state"
	"github.com/cozystack/cozy-health/pkg/report"
)

// TestGraceIsTheServers: the heartbeat grace is 3 x the interval the node
// reports, clamped to [MinReportInterval, 2 x the configured interval], so a
// node cannot stretch its own freshness by reporting a long interval (a
// 50-year interval read Healthy 30 days after the node fell silent), nor
// shrink it below a second.
func TestGraceIsTheServers(t *testing.T) {
	cfg := Config{DefaultInterval: 5 * time.Second, FreshForMultiple: 6}
	for _, tc := range []struct {
		reported, want time.Duration
	}{
		{5 * time.Second, 15 * time.Second},
		{2 * time.Second, 6 * time.Second},
		{10 * time.Second, 30 * time.Second},
		{11 * time.Second, 30 * time.Second},
		{50 * 365 * 24 * time.Hour, 30 * time.Second},
		{time.Nanosecond, 3 * time.Second},
		{0, 15 * time.Second},
		{-time.Hour, 15 * time.Second},
	} {
		assert.Equal(t, tc.want, cfg.Grace(tc.reported), "reported %s", tc.reported)
	}
	// The --heartbeat-grace flag still wins.
	assert.Equal(t, time.Minute, Config{HeartbeatGrace: time.Minute, DefaultInterval: 5 * time.Second}.Grace(50*365*24*time.Hour))

	// The reproduction: a node that reported a 50-year interval and went
	// silent reads Unknown/HeartbeatMissed 30 days later, not Healthy.
	t0 := time.Unix(1_800_000_000, 0)
	r := &report.NodeReport{NodeName: "w1", AgentInstanceID: "i", Sequence: 1, SentAt: t0, Interval: 50 * 365 * 24 * time.Hour,
		Observations: []report.Observation{{Component: report.ComponentDisk, Check: report.CheckFsyncProbe, Status: report.StatusHealthy, Reason: "Fast",
			ResourceRef: &report.ResourceRef{Kind: report.KindNode, Name: "w1"}}}}
	snap := state.Snapshot{"w1": {Report: r, ReceivedAt: t0}}
	now := t0.Add(30 * 24 * time.Hour)
	assert.True(t, cfg.Stale(snap["w1"], now))
	got := Compute(snap, now, cfg)
	assert.Equal(t, report.StatusUnknown, got[report.ComponentDisk].Nodes["w1"].Status)
	assert.Equal(t, report.ReasonHeartbeatMissed, got[report.ComponentDisk].Nodes["w1"].Reason)
	assert.True(t, cfg.Stale(snap["w1"], t0.Add(31*time.Second)), "past 3 x 2 x the configured 5 s")
	assert.False(t, cfg.Stale(snap["w1"], t0.Add(30*time.Second)))
}

package quorum

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// TestAuditorCountsOncePerWindow: a claim judged again on every rollup is
// counted once per node, kind and reason per Window; log lines are capped.
func TestAuditorCountsOncePerWindow(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	core, logs := observer.New(zap.WarnLevel)
	reg := prometheus.NewRegistry()
	a, err := NewAuditor(reg, zap.New(core), func() time.Time { return now })
	require.NoError(t, err)
	r := Rejection{Node: "w", Kind: "etcd-member", Reason: "not_control_plane"}
	for range 5 {
		a.Reject(r, "")
	}
	assert.InDelta(t, 1, testutil.ToFloat64(a.counter.WithLabelValues("etcd-member", "not_control_plane")), 0)
	now = now.Add(Window)
	a.Reject(r, "")
	assert.InDelta(t, 2, testutil.ToFloat64(a.counter.WithLabelValues("etcd-member", "not_control_plane")), 0, "counted again after a window")
	for i := range 3 * LogsPerWindow {
		a.Reject(Rejection{Node: string(rune('a' + i)), Kind: "drbd-replica", Reason: "not_corroborated"}, "pvc-1")
	}
	assert.LessOrEqual(t, logs.Len(), 1+LogsPerWindow+1, "log lines capped per window")
	var nilA *Auditor
	nilA.Reject(r, "") // a nil Auditor drops
}

package verify

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/pkg/signing"
)

func TestCheckOrderAndState(t *testing.T) {
	key, err := signing.Generate()
	require.NoError(t, err)
	now := time.Unix(1_800_000_000, 0)
	c := New(Limits{MaxPayloadBytes: 4 << 10, SkewWindow: time.Minute, RatePerNode: 1, RateBurst: 3})
	sess := &Session{Node: "cp1", Key: key.VerifyKey(), KeyID: key.KeyID(), Instance: "inst"}
	var got []uint64
	accept := func(r *report.NodeReport, _ time.Time) { got = append(got, r.Sequence) }
	sign := func(r *report.NodeReport) []any {
		sr, err := key.SignReport(r)
		require.NoError(t, err)
		seq, reason, _ := c.Verify(sess, sr, now, accept)
		return []any{seq, reason}
	}
	assert.Equal(t, []any{uint64(5), ""}, sign(sample("cp1", "inst", 5, now, 2)))
	// Oversized is decided before the rate bucket is touched.
	big := sample("cp1", "inst", 6, now, 1)
	big.Observations[0].Message = strings.Repeat("x", 5<<10)
	assert.Equal(t, []any{uint64(0), ReasonOversized}, sign(big))
	assert.Equal(t, []any{uint64(5), ReasonReplay}, sign(sample("cp1", "inst", 5, now, 2)))
	assert.Equal(t, []any{uint64(6), ""}, sign(sample("cp1", "inst", 6, now, 2)))
	// The bucket (burst 3) is empty now; time refills it.
	assert.Equal(t, []any{uint64(0), ReasonRateLimited}, sign(sample("cp1", "inst", 7, now, 2)))
	now = now.Add(2 * time.Second)
	assert.Equal(t, []any{uint64(7), ""}, sign(sample("cp1", "inst", 7, now, 2)))
	assert.Equal(t, []uint64{5, 6, 7}, got)

	// Another node's sequences are its own.
	other := &Session{Node: "cp2", Key: key.VerifyKey(), KeyID: key.KeyID(), Instance: "inst"}
	sr, err := key.SignReport(sample("cp2", "inst", 1, now, 1))
	require.NoError(t, err)
	_, reason, _ := c.Verify(other, sr, now, accept)
	assert.Empty(t, reason)
}

func TestIdleStateIsForgottenOnlyAfterTheSkewWindow(t *testing.T) {
	g := newReplayGuard(time.Minute)
	now := time.Unix(1_800_000_000, 0)
	k := replayKey{node: "n", keyID: "k", instance: "i"}
	g.entry(k, now).last = 9
	// Within twice the skew window a replay would still pass the skew
	// check, so the entry must survive sweeps.
	g.entry(replayKey{node: "other"}, now.Add(2*time.Minute))
	require.Contains(t, g.m, k)
	assert.Equal(t, uint64(9), g.m[k].last)
	later := now.Add(2*time.Minute + 2*time.Minute)
	g.entry(replayKey{node: "other2"}, later)
	_, kept := g.m[k]
	assert.False(t, kept, "swept once idle past 2*skew + 1m")
}

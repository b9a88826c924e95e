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

// TestCheckRefusesOutOfBounds: a validly signed report of the stream's
// node with one field outside the Health CRD's bounds (a reason over 1,024
// bytes, an empty resourceRef.name, 9,000 check names) is refused as
// malformed and reaches no sink; the next good report is accepted.
func TestCheckRefusesOutOfBounds(t *testing.T) {
	key, err := signing.Generate()
	require.NoError(t, err)
	now := time.Unix(1_800_000_000, 0)
	// A payload limit raised past the default (--max-payload-bytes), so
	// 9,000 observations pass the size gate and meet the count.
	c := New(Limits{MaxPayloadBytes: 4 << 20, SkewWindow: time.Minute, RatePerNode: 1e9, RateBurst: 1 << 30})
	sess := &Session{Node: "cp1", Key: key.VerifyKey(), KeyID: key.KeyID(), Instance: "inst"}
	var got []uint64
	accept := func(r *report.NodeReport, _ time.Time) { got = append(got, r.Sequence) }
	seq := uint64(0)
	check := func(mutate func(r *report.NodeReport)) (string, string) {
		seq++
		r := sample("cp1", "inst", seq, now, 3)
		mutate(r)
		sr, err := key.SignReport(r)
		require.NoError(t, err)
		_, reason, detail := c.Verify(sess, sr, now, accept)
		return reason, detail
	}
	reason, detail := check(func(r *report.NodeReport) { r.Observations[1].Reason = strings.Repeat("R", 1025) })
	assert.Equal(t, ReasonMalformed, reason)
	assert.Contains(t, detail, "reason of 1025 bytes")
	reason, detail = check(func(r *report.NodeReport) {
		r.Observations[0].ResourceRef = &report.ResourceRef{Kind: report.KindResource}
	})
	assert.Equal(t, ReasonMalformed, reason)
	assert.Contains(t, detail, "resourceRef.name is empty")
	reason, detail = check(func(r *report.NodeReport) {
		o := r.Observations[0]
		o.Attributes, o.ResourceRef = nil, nil
		r.Observations = r.Observations[:0]
		for i := range 9000 {
			o.Check = "c" + strings.Repeat("x", i%7) + "-" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676))
			r.Observations = append(r.Observations, o)
		}
	})
	assert.Equal(t, ReasonMalformed, reason)
	assert.Contains(t, detail, "9000 observations")
	reason, detail = check(func(r *report.NodeReport) {
		o := r.Observations[0]
		r.Observations = r.Observations[:0]
		for i := range 65 {
			o.Check = "check-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
			r.Observations = append(r.Observations, o)
		}
	})
	assert.Equal(t, ReasonMalformed, reason)
	assert.Contains(t, detail, "more than 64 distinct checks")
	assert.Empty(t, got)
	reason, _ = check(func(*report.NodeReport) {})
	assert.Empty(t, reason)
	assert.Equal(t, []uint64{5}, got)
}

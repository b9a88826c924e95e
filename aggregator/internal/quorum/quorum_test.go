package quorum

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestNeeded(t *testing.T) {
	for v, want := range map[int]int{1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 4} {
		assert.Equal(t, want, Needed(v), "V=%d", v)
	}
}

func TestSize(t *testing.T) {
	var s Size
	v, from := s.Voting()
	assert.Equal(t, 0, v)
	assert.Equal(t, Counted, from, "nothing reported: the (zero) members seen")

	s.Seen()
	s.Seen()
	v, from = s.Voting()
	assert.Equal(t, 2, v)
	assert.Equal(t, Counted, from)
	assert.Zero(t, s.Missing())

	s.Report(3)
	s.Report(5)
	s.Report(4)
	v, from = s.Voting()
	assert.Equal(t, 5, v, "the largest reported count wins")
	assert.Equal(t, Reported, from)
	assert.Equal(t, 3, s.Missing(), "5 voting members, 2 described by reports")

	var zero Size
	zero.Report(0)
	v, from = zero.Voting()
	assert.Equal(t, 0, v)
	assert.Equal(t, Reported, from, "a reported 0 is a report")

	var more Size
	more.Report(1)
	more.Seen()
	more.Seen()
	assert.Zero(t, more.Missing(), "more members seen than reported is never a negative gap")
}

func TestJudge(t *testing.T) {
	for _, tc := range []struct {
		c    Count
		want Judgement
	}{
		{Count{}, Empty},
		{Count{Voting: 1, Healthy: 1}, Intact},
		{Count{Voting: 1, Bad: 1}, Lost},
		{Count{Voting: 1}, Undetermined},
		{Count{Voting: 3, Healthy: 3}, Intact},
		{Count{Voting: 3, Healthy: 2, Bad: 1}, AtRisk},
		{Count{Voting: 3, Healthy: 2}, AtRisk},
		// The case: one member stopped, another node silent.
		{Count{Voting: 3, Healthy: 1, Bad: 1}, Undetermined},
		{Count{Voting: 3, Healthy: 1, Bad: 2}, Lost},
		{Count{Voting: 3, Bad: 1}, Undetermined},
		{Count{Voting: 3}, Undetermined},
		{Count{Voting: 5, Healthy: 3, Bad: 2}, AtRisk},
		{Count{Voting: 5, Healthy: 2, Bad: 1}, Undetermined},
		{Count{Voting: 5, Healthy: 2, Bad: 3}, Lost},
		{Count{Voting: 5, Healthy: 1, Bad: 2}, Undetermined},
		{Count{Voting: 5, Bad: 3}, Lost},
		// More healthy than the reported size (a member added since): intact.
		{Count{Voting: 3, Healthy: 4}, Intact},
	} {
		assert.Equal(t, tc.want, tc.c.Judge(), "V=%d H=%d B=%d U=%d", tc.c.Voting, tc.c.Healthy, tc.c.Bad, tc.c.Unknown())
	}
	assert.Equal(t, 2, Count{Voting: 5, Healthy: 2, Bad: 1}.Unknown())
	assert.Equal(t, 0, Count{Voting: 3, Healthy: 2, Bad: 2}.Unknown(), "never negative")
}

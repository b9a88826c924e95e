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
		// A disputed size never proves a loss.
		{Count{Voting: 5, Healthy: 2, Bad: 3, Disputed: true}, Undetermined},
		{Count{Voting: 5, Healthy: 3, Disputed: true}, AtRisk},
	} {
		assert.Equal(t, tc.want, tc.c.Judge(), "V=%d H=%d B=%d U=%d", tc.c.Voting, tc.c.Healthy, tc.c.Bad, tc.c.Unknown())
	}
	assert.Equal(t, 2, Count{Voting: 5, Healthy: 2, Bad: 1}.Unknown())
	assert.Equal(t, 0, Count{Voting: 3, Healthy: 2, Bad: 2}.Unknown(), "never negative")
}

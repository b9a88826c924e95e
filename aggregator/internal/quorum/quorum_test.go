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

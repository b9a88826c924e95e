package state

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/cozystack/cozy-health/pkg/report"
)

// TestAcceptVia: a relayed report is stored only when newer than the one
// held; a direct report of the same sequence replaces a relayed one and
// flips Via back to ""; a relayed report of another instance needs a later
// sent-at.
func TestAcceptVia(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	at := func(r0 uint64) time.Time { return t0.Add(time.Duration(r0) * 5 * time.Second) }
	mk := func(inst string, seq uint64) *reportT { r := rep("n1", inst, seq); r.SentAt = at(seq); return r }
	obs := &recorder{}
	s := New(obs)
	s.Expect("n1", t0)

	assert.True(t, s.AcceptVia(mk("i1", 1), at(1), ""))
	assert.True(t, s.AcceptVia(mk("i1", 2), at(2), "aggregator-1"), "a newer relayed report is stored")
	e, _ := s.Get("n1")
	assert.Equal(t, "aggregator-1", e.Via)
	assert.Equal(t, uint64(2), e.Report.Sequence)

	assert.False(t, s.AcceptVia(mk("i1", 2), at(2), "aggregator-2"), "the same report relayed again is not newer")
	assert.False(t, s.AcceptVia(mk("i1", 1), at(1), "aggregator-2"), "an older relayed report is refused")
	assert.False(t, directAccept(s, mk("i1", 1)), "an older direct report does not replace a newer relayed one")

	assert.True(t, directAccept(s, mk("i1", 2)), "the same report heard directly replaces the relayed copy")
	e, _ = s.Get("n1")
	assert.Empty(t, e.Via)
	assert.False(t, s.AcceptVia(mk("i1", 2), at(2), "aggregator-1"), "a relayed copy never replaces the direct one of the same sequence")

	old := mk("i0", 9)
	old.SentAt = at(1)
	assert.False(t, s.AcceptVia(old, at(1), "aggregator-1"), "a relayed report of another instance sent earlier is refused")
	fresh := mk("i2", 1)
	fresh.SentAt = at(3)
	assert.True(t, s.AcceptVia(fresh, at(3), "aggregator-1"), "a relayed report of a restarted agent, sent later, is stored")
	assert.True(t, directAccept(s, mk("i1", 3)), "a direct report of another instance wins, as Accept has it")

	s.DeleteNode("n1")
	assert.False(t, s.AcceptVia(mk("i1", 4), at(4), "aggregator-1"), "a deleted node is not resurrected by a peer")
	assert.Equal(t, []string{"n1", "n1", "n1", "n1", "n1"}, obs.accepted)
}

type reportT = report.NodeReport

// directAccept accepts r through the DirectSink, as ingest does.
func directAccept(s *State, r *reportT) bool {
	before := s.Generation()
	DirectSink{S: s}.Accept(r, r.SentAt)
	return s.Generation() != before
}

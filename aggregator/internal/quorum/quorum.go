// Package quorum is the one quorum rule of the raft clusters cozy-health
// judges (etcd; ovn-central's Northbound and Southbound databases), shared
// by the rollup's projections and the drain rules, so the two never
// disagree on how many members vote or how many make a quorum.
package quorum

// Source says where a cluster's voting-member count came from.
type Source uint8

const (
	// Reported: the largest count a fresh member reported
	// (etcd-membership's votingMembers, ovn-central's raftServers).
	Reported Source = iota + 1
	// Counted: no fresh member reported a count; it is the number of voting
	// members (learners excluded) that the reports describe.
	Counted
)

// Size accumulates a cluster's voting-member count from reports. The zero
// value is an empty cluster.
type Size struct {
	reported int
	any      bool
	seen     int
}

// Report records a count of voting members that a fresh member reported;
// the largest wins. Counts from members whose node is stale must not be
// reported: the membership may have changed since.
func (s *Size) Report(voting int) {
	if !s.any || voting > s.reported {
		s.reported, s.any = voting, true
	}
}

// Seen records one voting member that a report describes.
func (s *Size) Seen() { s.seen++ }

// Voting is the cluster's voting-member count and where it came from: the
// largest reported count, else the voting members seen.
func (s Size) Voting() (int, Source) {
	if s.any {
		return s.reported, Reported
	}
	return s.seen, Counted
}

// Missing is how many voting members no report describes (never negative).
func (s Size) Missing() int {
	v, _ := s.Voting()
	return max(v-s.seen, 0)
}

// Needed is the quorum of a cluster of voting members: floor(V/2)+1.
func Needed(voting int) int { return voting/2 + 1 }

// Count is what is known of a raft cluster's voting members: Voting of
// them in all, Healthy known healthy, Bad known not healthy; the others
// (stale, never reported, Unknown, on no reporting node) are unknown. An
// unknown member is never counted healthy, and never counted lost.
type Count struct {
	Voting, Healthy, Bad int
}

// Unknown is the number of voting members whose health is not known.
func (c Count) Unknown() int { return max(c.Voting-c.Healthy-c.Bad, 0) }

// Judgement is a Count's verdict on the cluster's quorum.
type Judgement uint8

const (
	// Intact: every voting member is healthy (H = V).
	Intact Judgement = iota + 1
	// AtRisk: a quorum is healthy, not every member (q <= H < V).
	AtRisk
	// Undetermined: whether a quorum is healthy hinges on the unknown
	// members (H < q <= H + U).
	Undetermined
	// Lost: even if every unknown member were healthy there would be no
	// quorum (H + U < q): the loss is proven.
	Lost
	// Empty: no voting member is known at all (V = 0).
	Empty
)

func (j Judgement) String() string {
	switch j {
	case Intact:
		return "Intact"
	case AtRisk:
		return "AtRisk"
	case Undetermined:
		return "Undetermined"
	case Lost:
		return "Lost"
	case Empty:
		return "Empty"
	}
	return "Judgement(?)"
}

// Judge is the one quorum rule, with q = floor(V/2)+1: Intact when H = V,
// AtRisk when q <= H < V, Lost only when H + U < q, Undetermined in
// between; Empty when V = 0.
func (c Count) Judge() Judgement {
	q := Needed(c.Voting)
	switch {
	case c.Voting <= 0:
		return Empty
	case c.Healthy >= c.Voting:
		return Intact
	case c.Healthy >= q:
		return AtRisk
	case c.Healthy+c.Unknown() < q:
		return Lost
	}
	return Undetermined
}

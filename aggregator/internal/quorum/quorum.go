// Package quorum is the one quorum rule of the raft clusters cozy-health
// judges (etcd; ovn-central's Northbound and Southbound databases) and the
// one reader of the facts it judges (reader.go), shared by the rollup's
// projections, the rollup cache and the drain rules, so they never
// disagree on which members are believed, how many vote, or how many make
// a quorum. audit.go counts and logs the claims the reader rejects.
package quorum

// Source says where a cluster's voting-member count came from.
type Source uint8

const (
	// Reported: the count a strict majority of the fresh accepted members
	// reported (etcd-membership's votingMembers, ovn-central's
	// raftServers).
	Reported Source = iota + 1
	// Counted: no fresh accepted member reported a count; it is the number
	// of voting members (learners excluded) the reports describe.
	Counted
	// Disputed: members reported counts and no majority agrees; the
	// largest is used, and a loss of quorum is never proven on it.
	Disputed
)

// Needed is the quorum of a cluster of voting members: floor(V/2)+1.
func Needed(voting int) int { return voting/2 + 1 }

// Count is what is known of a raft cluster's voting members: Voting of
// them in all, Healthy known healthy, Bad known not healthy; the others
// (stale, never reported, Unknown, on no reporting node) are unknown. An
// unknown member is never counted healthy, and never counted lost.
type Count struct {
	Voting, Healthy, Bad int
	// Disputed: Voting is not agreed by a majority of the members (Source
	// Disputed); Judge then never proves a loss (Lost reads Undetermined),
	// so one member's claim of a larger cluster cannot turn a healthy
	// cluster Down.
	Disputed bool
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
// AtRisk when q <= H < V, Lost only when H + U < q (and V is not
// Disputed), Undetermined in between; Empty when V = 0. H counts every
// member that can vote (View.Count: Healthy, and Degraded members that
// vote but warn); only a member that cannot vote is bad.
func (c Count) Judge() Judgement {
	q := Needed(c.Voting)
	switch {
	case c.Voting <= 0:
		return Empty
	case c.Healthy >= c.Voting:
		return Intact
	case c.Healthy >= q:
		return AtRisk
	case c.Healthy+c.Unknown() < q && !c.Disputed:
		return Lost
	}
	return Undetermined
}

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

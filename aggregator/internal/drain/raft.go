package drain

import (
	"fmt"
	"strings"
	"time"

	"github.com/cozystack/cozy-health/aggregator/internal/quorum"
	"github.com/cozystack/cozy-health/pkg/report"
)

// Attribute names of raft and replica findings.
const (
	AttrVoting            = "votingMembers"
	AttrQuorum            = "quorum"
	AttrHealthyAfterDrain = "healthyAfterDrain"
	AttrUncertain         = "uncertainMembers"
	AttrReplicas          = "replicas"
	AttrUpToDateAfter     = "upToDateAfterDrain"
	AttrReachableAfter    = "reachableAfterDrain"
	AttrUncertainReplicas = "uncertainReplicas"
)

// projection is a raft cluster after the target's member is removed.
type projection struct {
	voting int
	// from tells where voting came from.
	from   quorum.Source
	quorum int
	// sure counts the other voting members certainly healthy; maybe those
	// whose health is not known (stale, never reported, Unknown).
	sure, maybe int
	// others describes every other voting member that is not certainly
	// healthy, e.g. "node-2 Down".
	others []string
}

// verdict is the quorum rule (quorum.Count.Judge) on the cluster without
// the target: safe when even the pessimistic projection keeps quorum
// (every uncertain member lost), blocked only when even the optimistic one
// loses it (every uncertain member healthy: the loss is proven), unknown
// in between and when the cluster's size is unknown.
func (p projection) verdict() Verdict {
	c := quorum.Count{Voting: p.voting, Healthy: p.sure, Bad: max(p.voting-p.sure-p.maybe, 0)}
	switch c.Judge() {
	case quorum.Intact, quorum.AtRisk:
		return Safe
	case quorum.Lost:
		return Blocked
	}
	return Unknown
}

func (p projection) attributes() map[string]float64 {
	return map[string]float64{AttrVoting: float64(p.voting), AttrQuorum: float64(p.quorum),
		AttrHealthyAfterDrain: float64(p.sure), AttrUncertain: float64(p.maybe)}
}

// member returns node's member of idx, if any.
func (idx *raftIndex) member(node string) (raftMember, bool) {
	for _, m := range idx.members {
		if m.node == node {
			return m, true
		}
	}
	return raftMember{}, false
}

// project removes target's member from idx and counts the rest at now.
// The cluster size is the largest any fresh node reports; without one, the
// number of voting members seen in reports.
func project(idx *raftIndex, target string, s *Snapshot, now time.Time) projection {
	var p projection
	var size quorum.Size
	for _, sz := range idx.sizes {
		if s.fresh(sz.node, now) {
			size.Report(sz.size)
		}
	}
	for _, m := range idx.members {
		if m.learner {
			continue
		}
		size.Seen()
		if m.node == target {
			continue
		}
		lv, why := s.liveness(m.node, now)
		switch {
		case lv == gone:
			p.others = append(p.others, m.node+" "+why)
		case lv == uncertain:
			p.maybe++
			p.others = append(p.others, m.node+" "+why)
		case m.status == report.StatusHealthy:
			p.sure++
		case m.status == report.StatusUnknown:
			p.maybe++
			p.others = append(p.others, fmt.Sprintf("%s Unknown (%s)", m.node, m.reason))
		default:
			p.others = append(p.others, fmt.Sprintf("%s %s (%s)", m.node, m.status, m.reason))
		}
	}
	p.voting, p.from = size.Voting()
	if missing := size.Missing(); missing > 0 {
		p.maybe += missing
		p.others = append(p.others, fmt.Sprintf("%d voting member(s) on no reporting node", missing))
	}
	p.quorum = quorum.Needed(p.voting)
	return p
}

// raftReason judges draining target against one raft cluster. what names
// the cluster in messages ("etcd", "kube-ovn ovn-central OVN_Northbound").
func raftReason(rule, component, what string, ref *report.ResourceRef, idx *raftIndex, target string, s *Snapshot, now time.Time) Reason {
	r := Reason{Rule: rule, Component: component, ResourceRef: ref}
	m, isMember := idx.member(target)
	switch {
	case isMember && m.learner:
		r.Verdict, r.Message = Safe, fmt.Sprintf("%s: %s is a learner; learners do not vote", what, target)
		return r
	case !isMember:
		n := s.nodes[target]
		if n.LastReport != nil {
			r.Verdict, r.Message = Safe, fmt.Sprintf("%s: %s hosts no member (as of its report of %s)", what, target, n.LastHeard.UTC().Format(time.RFC3339))
			return r
		}
		p := project(idx, target, s, now)
		if len(idx.members) > 0 && p.from == quorum.Reported && p.maybe == 0 {
			r.Verdict, r.Message = Safe, fmt.Sprintf("%s: %s sends no report, but all %d voting members are accounted for on other nodes", what, target, p.voting)
			return r
		}
		r.Verdict, r.Message = Unknown, fmt.Sprintf("%s: whether %s hosts a voting member is unknown: its agent never reported", what, target)
		return r
	}
	p := project(idx, target, s, now)
	r.Verdict, r.Attributes = p.verdict(), p.attributes()
	var with string
	if len(p.others) > 0 {
		with = fmt.Sprintf("with %s, ", strings.Join(p.others, ", "))
	}
	switch {
	case p.voting == 0:
		r.Verdict = Unknown
		r.Message = fmt.Sprintf("%s: %s is a voting member but the cluster size is unknown", what, target)
	case r.Verdict == Unknown:
		r.Message = fmt.Sprintf("%s: %s is a voting member; %sdraining %s leaves %d of %d voting members certainly healthy (%d if the %d uncertain are healthy), quorum needs %d",
			what, target, with, target, p.sure, p.voting, p.sure+p.maybe, p.maybe, p.quorum)
	default:
		r.Message = fmt.Sprintf("%s: %s is a voting member; %sdraining %s leaves %d of %d voting members healthy, quorum needs %d",
			what, target, with, target, p.sure, p.voting, p.quorum)
	}
	return r
}

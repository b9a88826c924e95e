package drain

import (
	"fmt"
	"strings"
	"time"

	"github.com/cozystack/cozy-health/aggregator/internal/quorum"
	"github.com/cozystack/cozy-health/aggregator/internal/state"
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
	voting   int
	disputed bool
	quorum   int
	// sure counts the other voting members certainly voting; maybe those
	// whose health is not known (stale, never reported, Unknown).
	sure, maybe int
	// others describes every other voting member that does not certainly
	// vote, e.g. "node-2 Down".
	others []string
}

// verdict is quorum.Count.Judge on the cluster without the target, its
// uncertain members unknown: Intact and AtRisk are Safe, Lost Blocked,
// the rest Unknown.
func (p projection) verdict() Verdict {
	c := quorum.Count{Voting: p.voting, Healthy: p.sure, Bad: max(p.voting-p.sure-p.maybe, 0), Disputed: p.disputed}
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

// project removes target's member from the reader's view v and counts
// the rest at now, as View.Count does (quorum.Class), except that a member
// on a node that is gone (cordoned, not a Kubernetes Node) is lost and one
// whose node's liveness is uncertain is uncertain.
func project(v *quorum.View, target string, s *Snapshot, now time.Time) projection {
	p := projection{voting: v.Voting, disputed: v.Source == quorum.Disputed, quorum: quorum.Needed(v.Voting)}
	for _, m := range v.Members {
		if m.Learner || m.Node == target {
			continue
		}
		lv, why := s.liveness(m.Node, now)
		switch {
		case lv == gone:
			p.others = append(p.others, m.Node+" "+why)
		case lv == uncertain:
			p.maybe++
			p.others = append(p.others, m.Node+" "+why)
		case m.Class.Counts():
			p.sure++
		case m.Class == quorum.Unknown:
			p.maybe++
			p.others = append(p.others, fmt.Sprintf("%s Unknown (%s)", m.Node, m.Reason))
		default:
			p.others = append(p.others, fmt.Sprintf("%s %s (%s)", m.Node, m.Status, m.Reason))
		}
	}
	if missing := v.Missing(); missing > 0 {
		p.maybe += missing
		p.others = append(p.others, fmt.Sprintf("%d voting member(s) on no reporting node", missing))
	}
	return p
}

// unknownWhy says, for messages, why a member's health is not known.
func unknownWhy(what string, m quorum.Member) string {
	switch m.Reason {
	case quorum.ReasonNoMemberObservation:
		return fmt.Sprintf("its report has no %s member observation (the check did not run or reported not applicable: on Talos, is the talosconfig patch applied?)", what)
	case quorum.ReasonClaimRejected:
		return "its report claims more than one member (rejected)"
	case report.ReasonNoData:
		return "its agent never reported"
	}
	return fmt.Sprintf("its member reads Unknown (%s)", m.Reason)
}

// presumed tells whether m is a member only presumed from its node's role
// (a control-plane node without a member observation, or whose claims
// were rejected): a loss of quorum is never proven on it.
func presumed(m quorum.Member) bool {
	switch m.Reason {
	case quorum.ReasonNoMemberObservation, quorum.ReasonClaimRejected, report.ReasonNoData:
		return true
	}
	return false
}

// raftReason judges draining target against one raft cluster, as the
// reader (quorum.Read) sees it. what names the cluster in messages
// ("etcd", "kube-ovn ovn-central OVN_Northbound"). Only a node known not to
// be control-plane (by its Node's labels) hosts no member for certain;
// a control-plane target whose own member is unknown is never safe (and
// never blocked when its membership is only presumed).
func raftReason(rule, component, what string, ref *report.ResourceRef, v *quorum.View, target string, s *Snapshot, now time.Time) Reason {
	r := Reason{Rule: rule, Component: component, ResourceRef: ref}
	n := s.nodes[target]
	m, isMember := v.Member(target)
	switch {
	case isMember && m.Learner:
		r.Verdict, r.Message = Safe, fmt.Sprintf("%s: %s is a learner; learners do not vote", what, target)
		return r
	case n.Role == state.RoleWorker:
		r.Verdict, r.Message = Safe, fmt.Sprintf("%s: %s hosts no member: it is not a control-plane node (no %s label), and members are believed only there", what, target, state.LabelControlPlane)
		return r
	case n.Role == state.RoleUnknown && n.LastReport == nil:
		r.Verdict, r.Message = Unknown, fmt.Sprintf("%s: whether %s hosts a voting member is unknown: its agent never reported and no Node object says its role", what, target)
		return r
	case n.Role == state.RoleUnknown:
		r.Verdict, r.Message = Unknown, fmt.Sprintf("%s: whether %s hosts a voting member is unknown: no Node object of that name is known, so its role (and its member claims) are not", what, target)
		return r
	case !isMember:
		if missing := v.Missing(); missing > 0 {
			r.Verdict = Unknown
			r.Message = fmt.Sprintf("%s: %s is a control-plane node that reports no member, and %d of %d voting members are on no reporting node: it may host one", what, target, missing, v.Voting)
			return r
		}
		r.Verdict, r.Message = Safe, fmt.Sprintf("%s: %s hosts no member (as of its report of %s); all %d voting members are accounted for", what, target, n.LastHeard.UTC().Format(time.RFC3339), v.Voting)
		return r
	}
	p := project(v, target, s, now)
	r.Verdict, r.Attributes = p.verdict(), p.attributes()
	var with string
	if len(p.others) > 0 {
		with = fmt.Sprintf("with %s, ", strings.Join(p.others, ", "))
	}
	switch {
	case p.voting == 0:
		r.Verdict = Unknown
		r.Message = fmt.Sprintf("%s: %s is a voting member but the cluster size is unknown", what, target)
	case m.Class == quorum.Unknown && (r.Verdict != Blocked || presumed(m)):
		r.Verdict = Unknown
		r.Message = fmt.Sprintf("%s: %s is a control-plane node whose own member is unknown: %s; %sdraining it leaves %d of %d voting members certainly healthy, quorum needs %d",
			what, target, unknownWhy(what, m), with, p.sure, p.voting, p.quorum)
	case r.Verdict == Unknown:
		r.Message = fmt.Sprintf("%s: %s is a voting member; %sdraining %s leaves %d of %d voting members certainly healthy (%d if the %d uncertain are healthy), quorum needs %d",
			what, target, with, target, p.sure, p.voting, p.sure+p.maybe, p.maybe, p.quorum)
	default:
		r.Message = fmt.Sprintf("%s: %s is a voting member; %sdraining %s leaves %d of %d voting members healthy, quorum needs %d",
			what, target, with, target, p.sure, p.voting, p.quorum)
	}
	if p.disputed {
		r.Message += fmt.Sprintf(" (voting members disputed: %v reported, no majority; the largest used)", v.Sizes)
	}
	if len(v.Below) > 0 {
		r.Message += fmt.Sprintf(" (size claims below the %d voting members listed rejected: %v)", v.Seen(), v.Below)
	}
	return r
}

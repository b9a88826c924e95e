package rollup

import (
	"fmt"
	"strings"
	"time"

	"github.com/cozystack/cozy-health/aggregator/internal/quorum"
	"github.com/cozystack/cozy-health/aggregator/internal/state"
	"github.com/cozystack/cozy-health/aggregator/internal/status"
	"github.com/cozystack/cozy-health/pkg/report"
)

// rejectFunc receives the claims the reader rejected (nil: dropped).
type rejectFunc func(quorum.Rejection, string)

// raftNodes is every node of the snapshot as the raft reader sees it:
// role, freshness and the claims of its report (claims[i] of names[i]).
func raftNodes(names []string, claims []*quorum.Claims, snap state.Snapshot, now time.Time, cfg Config) []quorum.Node {
	out := make([]quorum.Node, len(names))
	for i, name := range names {
		e := snap[name]
		out[i] = quorum.Node{Name: name, Role: e.Role, Reported: e.Report != nil, Fresh: !cfg.Stale(e, now), Claims: claims[i]}
	}
	return out
}

// judgeRaft applies the quorum rule (quorum.Count.Judge) to a cluster's
// View. It returns the cluster's effect on its component, the reason of
// that effect, and the conditions: the Quorum condition first (pinned to
// ref; nil for etcd, the component itself), then, when memberConds is set,
// one QuorumMember condition per voting member.
//
// How a member counts (votes, lost, unknown) is the quorum package's
// (quorum.Classify, View.Count), and so is the verdict (quorum.Count.Judge);
// this states what each verdict publishes. The Quorum condition is Healthy
// (all voting members vote), Degraded (QuorumAtRisk), Down (QuorumLost,
// only when even every unknown member voting would not make a quorum) or
// Unknown (QuorumUndetermined, naming the unknown members; NoVotingMembers
// when none is known). The component: Down when quorum is lost; else Down
// (AlarmNOSPACE) when a majority of the members reporting etcd's alarms
// report NOSPACE (fewer: Degraded, AlarmNOSPACE); else Degraded when quorum
// is at risk, or a member warns (with the member's reason), or the quorum
// is undetermined and a member is known lost; else as the Quorum condition.
func judgeRaft(v *quorum.View, what, sizeFrom string, ref *report.ResourceRef, memberConds bool) (report.Status, string, []status.Condition) {
	count := v.Count()
	var bad, warns, unknown []string
	var conds []status.Condition
	warnReason := ""
	for _, m := range v.Members {
		if m.Learner {
			continue
		}
		c := status.Condition{Type: TypeQuorumMember, Node: m.Node, Severity: m.Status, Reason: m.Reason}
		switch m.Class {
		case quorum.Votes:
			c.Message = "voting member, healthy"
		case quorum.Warns:
			warns = append(warns, fmt.Sprintf("%s (%s)", m.Node, m.Reason))
			if warnReason == "" {
				warnReason = m.Reason
			}
			c.Message = "voting member, votes but warns: counted for quorum"
		case quorum.NoSpace:
			c.Message = "voting member under etcd's NOSPACE alarm (cluster-wide): it votes, counted for quorum"
		case quorum.CannotVote:
			bad = append(bad, fmt.Sprintf("%s %s (%s)", m.Node, m.Status, m.Reason))
			c.Message = fmt.Sprintf("voting member that cannot vote: %s", m.Status)
		default:
			unknown = append(unknown, fmt.Sprintf("%s (%s)", m.Node, m.Reason))
			c.Message = "voting member, health unknown: counted neither healthy nor lost"
		}
		if memberConds {
			conds = append(conds, c)
		}
	}
	if missing := v.Missing(); missing > 0 {
		s := fmt.Sprintf("%d on no reporting node", missing)
		if len(v.Candidates) > 0 {
			s += fmt.Sprintf(" (control-plane nodes that report no member: %s)", strings.Join(v.Candidates, ", "))
		}
		unknown = append(unknown, s)
	}
	q := status.Condition{Type: TypeQuorum, Resource: ref}
	effect := report.StatusUnknown
	switch count.Judge() {
	case quorum.Empty:
		q.Severity, q.Reason = report.StatusUnknown, ReasonNoVotingMembers
	case quorum.Intact:
		q.Severity, q.Reason = report.StatusHealthy, ReasonQuorumHealthy
	case quorum.AtRisk:
		q.Severity, q.Reason = report.StatusDegraded, ReasonQuorumAtRisk
	case quorum.Lost:
		q.Severity, q.Reason = report.StatusDown, ReasonQuorumLost
	case quorum.Undetermined:
		q.Severity, q.Reason = report.StatusUnknown, ReasonQuorumUndetermined
		if count.Bad > 0 {
			effect = report.StatusDegraded
		}
	}
	reason := q.Reason
	if q.Severity != report.StatusUnknown {
		effect = q.Severity
	}
	if v.Voting == 0 {
		q.Message = fmt.Sprintf("%s: no voting member is known", what)
	} else {
		q.Message = fmt.Sprintf("%s: %d/%d voting members vote, quorum needs %d (voting members from %s)",
			what, count.Healthy, v.Voting, quorum.Needed(v.Voting), v.SizeNote(sizeFrom))
	}
	if len(bad) > 0 {
		q.Message += "; cannot vote: " + strings.Join(bad, ", ")
	}
	if len(warns) > 0 {
		q.Message += "; vote but warn: " + strings.Join(warns, ", ")
	}
	if len(unknown) > 0 {
		q.Message += "; unknown: " + strings.Join(unknown, ", ")
	}
	switch {
	case effect == report.StatusDown:
	case v.NoSpaceAgreed():
		effect, reason = report.StatusDown, quorum.ReasonAlarmNOSPACE
		q.Message += fmt.Sprintf("; NOSPACE alarm reported by %d of %d members reporting alarms: etcd refuses writes cluster-wide", v.NoSpace, v.AlarmReporters)
	case v.NoSpace > 0:
		q.Message += fmt.Sprintf("; NOSPACE alarm reported by only %d of %d members reporting alarms (no majority)", v.NoSpace, v.AlarmReporters)
		if effect.Rank() < report.StatusDegraded.Rank() {
			effect, reason = report.StatusDegraded, quorum.ReasonAlarmNOSPACE
		}
	case effect == report.StatusDegraded:
	case len(warns) > 0:
		effect, reason = report.StatusDegraded, warnReason
	}
	q.Message = status.Truncate(q.Message)
	return effect, reason, append([]status.Condition{q}, conds...)
}

// etcdQuorum judges etcd on the quorum projection (judgeRaft). The first
// condition returned is the component-level Quorum condition; one
// QuorumMember condition per voting member follows.
func etcdQuorum(nodes []quorum.Node, reject rejectFunc) (report.Status, string, []status.Condition) {
	v := quorum.Read(quorum.Etcd, nodes)
	rejected(reject, v.Rejected)
	return judgeRaft(&v, "etcd", "etcd-membership", nil, true)
}

func rejected(reject rejectFunc, rs []quorum.Rejection) {
	if reject == nil {
		return
	}
	for _, r := range rs {
		reject(r, "")
	}
}

// ovnCentralQuorum judges each of ovn-central's clustered databases on the
// quorum projection (judgeRaft), from the ovn-central-member observations
// (one per node hosting a member, pinned to its OVNDatabase). It returns
// the worst effect, its reason and one component-level Quorum condition
// per database, pinned to the database. kube-ovn is observed on some fresh
// node when this is called, so a database no node reports a member of is
// Unknown (NoVotingMembers): ovn-central runs somewhere, and where is not
// known.
func ovnCentralQuorum(nodes []quorum.Node, reject rejectFunc) (report.Status, string, []status.Condition) {
	worst, reason := report.StatusHealthy, ReasonQuorumHealthy
	conds := make([]status.Condition, 0, len(quorum.OVNDatabases))
	for _, db := range quorum.OVNDatabases {
		v := quorum.Read(db, nodes)
		rejected(reject, v.Rejected)
		effect, why, cs := judgeRaft(&v, "ovn-central "+db, "raftServers", &report.ResourceRef{Kind: report.KindOVNDatabase, Name: db}, false)
		q := cs[0]
		if q.Reason == ReasonNoVotingMembers {
			q.Message = fmt.Sprintf("ovn-central %s: no control-plane node reports a member (the agents' --ovn-nb-ctl/--ovn-sb-ctl sockets and --ovn-db-dir files); its quorum is unknown", db)
		}
		if effect.Rank() > worst.Rank() {
			worst, reason = effect, why
		}
		conds = append(conds, q)
	}
	return worst, reason, conds
}

// worstOtherEtcdCheck is the worst etcd observation of fresh control-plane
// nodes other than the member and membership checks the projection
// already judged, and a NOSPACE alarm (judged there too). A Degraded or
// Down one (fsync latency, a CORRUPT alarm) degrades etcd to at most
// Degraded: the cluster still serves with a reduced margin; only the
// projection makes etcd Down. A node not labelled control-plane says
// nothing about etcd.
func worstOtherEtcdCheck(nodes []quorum.Node, snap state.Snapshot) report.Status {
	worst := report.StatusHealthy
	for _, n := range nodes {
		if !n.Fresh || n.Role != state.RoleControlPlane {
			continue
		}
		for _, o := range snap[n.Name].Observations() {
			if o.Component != report.ComponentEtcd || o.Check == report.CheckEtcdMember || o.Check == report.CheckEtcdMembership {
				continue
			}
			if o.Check == report.CheckEtcdAlarms && o.Reason == quorum.ReasonAlarmNOSPACE {
				continue
			}
			worst = report.Worse(worst, o.Status)
		}
	}
	return worst
}

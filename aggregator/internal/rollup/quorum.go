package rollup

import (
	"fmt"
	"strings"
	"time"

	"github.com/cozystack/cozy-health/aggregator/internal/quorum"
	"github.com/cozystack/cozy-health/aggregator/internal/state"
	"github.com/cozystack/cozy-health/pkg/report"
)

// etcdMember is one node's etcd member as its latest report describes it.
type etcdMember struct {
	node    string
	learner bool
	fresh   bool
	status  report.Status
	reason  string
}

// etcdQuorum judges etcd on the quorum projection. The first condition
// returned is the component-level Quorum condition; one QuorumMember
// condition per voting member follows. Learners do not vote; a member whose
// node is stale or whose etcd-member observation is not Healthy is not
// counted healthy. The voting-member count is the largest votingMembers a
// fresh node's etcd-membership observation carries; without one, the
// members reports describe that are not learners.
func etcdQuorum(names []string, snap state.Snapshot, now time.Time, cfg Config) (report.Status, []Condition) {
	var members []etcdMember
	var size quorum.Size
	for _, name := range names {
		e := snap[name]
		fresh := !cfg.Stale(e, now)
		for _, o := range e.Observations() {
			if o.Component != report.ComponentEtcd {
				continue
			}
			// The attributes read here are judgedAttributes.
			switch o.Check {
			case report.CheckEtcdMember:
				m := etcdMember{node: name, learner: o.Attributes[report.AttrIsLearner] == 1, fresh: fresh, status: o.Status, reason: o.Reason}
				if !fresh {
					m.status, m.reason = report.StatusUnknown, report.ReasonHeartbeatMissed
				}
				members = append(members, m)
			case report.CheckEtcdMembership:
				if v, ok := o.Attributes[report.AttrVotingMembers]; ok && fresh {
					size.Report(int(v))
				}
			}
		}
	}
	var healthy int
	var notHealthy []string
	var memberConds []Condition
	for _, m := range members {
		if m.learner {
			continue
		}
		size.Seen()
		c := Condition{Type: TypeQuorumMember, Node: m.node, Severity: m.status, Reason: m.reason}
		if m.status == report.StatusHealthy {
			healthy++
			c.Message = "voting member, healthy"
		} else {
			c.Message = fmt.Sprintf("voting member, not counted healthy: %s", m.status)
			notHealthy = append(notHealthy, fmt.Sprintf("%s (%s)", m.node, m.reason))
		}
		memberConds = append(memberConds, c)
	}
	voting, from := size.Voting()
	source := "etcd-membership"
	if from == quorum.Counted {
		source = "counted etcd-member observations"
	}
	q := Condition{Type: TypeQuorum}
	switch {
	case voting == 0:
		q.Severity, q.Reason = report.StatusUnknown, ReasonNoVotingMembers
	case healthy >= voting:
		q.Severity, q.Reason = report.StatusHealthy, ReasonQuorumHealthy
	case healthy >= quorum.Needed(voting):
		q.Severity, q.Reason = report.StatusDegraded, ReasonQuorumAtRisk
	default:
		q.Severity, q.Reason = report.StatusDown, ReasonQuorumLost
	}
	q.Message = fmt.Sprintf("%d/%d voting members healthy (voting members from %s)", healthy, voting, source)
	if missing := size.Missing(); missing > 0 {
		q.Message += fmt.Sprintf("; %d voting member(s) on no reporting node", missing)
	}
	if len(notHealthy) > 0 {
		q.Message += "; not healthy: " + strings.Join(notHealthy, ", ")
	}
	q.Message = truncate(q.Message)
	return q.Severity, append([]Condition{q}, memberConds...)
}

// worstOtherEtcdCheck is the worst etcd observation on fresh nodes other
// than the member and membership checks the projection already judged. A
// Degraded or Down one (fsync latency, alarms) degrades etcd to at most
// Degraded: the cluster still serves with a reduced margin; only the
// projection makes etcd Down.
func worstOtherEtcdCheck(names []string, snap state.Snapshot, now time.Time, cfg Config) report.Status {
	worst := report.StatusHealthy
	for _, name := range names {
		e := snap[name]
		if cfg.Stale(e, now) {
			continue
		}
		for _, o := range e.Observations() {
			if o.Component != report.ComponentEtcd || o.Check == report.CheckEtcdMember || o.Check == report.CheckEtcdMembership {
				continue
			}
			if o.Status == report.StatusDegraded || o.Status == report.StatusDown {
				worst = report.Worse(worst, o.Status)
			}
		}
	}
	return worst
}

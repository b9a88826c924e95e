package rollup

import (
	"fmt"
	"strings"
	"time"

	"github.com/cozystack/cozy-health/aggregator/internal/quorum"
	"github.com/cozystack/cozy-health/aggregator/internal/state"
	"github.com/cozystack/cozy-health/pkg/report"
)

// raftMember is one node's member of a raft cluster as that node's latest
// report describes it.
type raftMember struct {
	node    string
	learner bool
	status  report.Status
	reason  string
}

// raftCluster is what the reports say of one raft cluster: etcd, or one of
// ovn-central's clustered databases.
type raftCluster struct {
	// what names the cluster in messages; sizeFrom names where a reported
	// voting-member count comes from.
	what, sizeFrom string
	// ref pins the Quorum condition to a resource (an OVN database); nil
	// for etcd, the component itself.
	ref     *report.ResourceRef
	members []raftMember
	size    quorum.Size
}

// add records a member observation of node; a member whose node is stale
// is Unknown (HeartbeatMissed), whatever its last report said.
func (rc *raftCluster) add(node string, fresh, learner bool, o report.Observation) {
	m := raftMember{node: node, learner: learner, status: o.Status, reason: o.Reason}
	if !fresh {
		m.status, m.reason = report.StatusUnknown, report.ReasonHeartbeatMissed
	}
	rc.members = append(rc.members, m)
}

// judge applies the quorum rule (quorum.Count.Judge) to the cluster. It
// returns the cluster's effect on its component and the conditions: the
// Quorum condition first, then, when memberConds is set, one QuorumMember
// condition per voting member.
//
// A member counts healthy when its observation is Healthy on a fresh node;
// known bad when it is Degraded or Down on a fresh node; unknown when its
// node is stale or its observation Unknown, and so is every voting member
// no report describes. The Quorum condition is Healthy (all healthy),
// Degraded (QuorumAtRisk), Down (QuorumLost, only when even every unknown
// member being healthy would not make a quorum) or Unknown
// (QuorumUndetermined, naming the unknown members; NoVotingMembers when
// none is known). An undetermined quorum makes the component Degraded when
// a member is known bad, else Unknown.
func (rc *raftCluster) judge(memberConds bool) (report.Status, []Condition) {
	var count quorum.Count
	var bad, unknown []string
	var conds []Condition
	for _, m := range rc.members {
		if m.learner {
			continue
		}
		rc.size.Seen()
		c := Condition{Type: TypeQuorumMember, Node: m.node, Severity: m.status, Reason: m.reason}
		switch m.status {
		case report.StatusHealthy:
			count.Healthy++
			c.Message = "voting member, healthy"
		case report.StatusUnknown:
			unknown = append(unknown, fmt.Sprintf("%s (%s)", m.node, m.reason))
			c.Message = "voting member, health unknown: counted neither healthy nor lost"
		default:
			count.Bad++
			bad = append(bad, fmt.Sprintf("%s %s (%s)", m.node, m.status, m.reason))
			c.Message = fmt.Sprintf("voting member, not healthy: %s", m.status)
		}
		if memberConds {
			conds = append(conds, c)
		}
	}
	voting, from := rc.size.Voting()
	count.Voting = voting
	source := rc.sizeFrom
	if from == quorum.Counted {
		source = "counted member observations"
	}
	if missing := rc.size.Missing(); missing > 0 {
		unknown = append(unknown, fmt.Sprintf("%d on no reporting node", missing))
	}
	q := Condition{Type: TypeQuorum, Resource: rc.ref}
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
	if q.Severity != report.StatusUnknown {
		effect = q.Severity
	}
	if voting == 0 {
		q.Message = fmt.Sprintf("%s: no voting member is known", rc.what)
	} else {
		q.Message = fmt.Sprintf("%s: %d/%d voting members healthy, quorum needs %d (voting members from %s)",
			rc.what, count.Healthy, voting, quorum.Needed(voting), source)
	}
	if len(bad) > 0 {
		q.Message += "; not healthy: " + strings.Join(bad, ", ")
	}
	if len(unknown) > 0 {
		q.Message += "; unknown: " + strings.Join(unknown, ", ")
	}
	q.Message = truncate(q.Message)
	return effect, append([]Condition{q}, conds...)
}

// etcdQuorum judges etcd on the quorum projection. The first condition
// returned is the component-level Quorum condition; one QuorumMember
// condition per voting member follows. Learners do not vote. The
// voting-member count is the largest votingMembers a fresh node's
// etcd-membership observation carries; without one, the members reports
// describe that are not learners.
func etcdQuorum(names []string, snap state.Snapshot, now time.Time, cfg Config) (report.Status, []Condition) {
	rc := raftCluster{what: "etcd", sizeFrom: "etcd-membership"}
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
				rc.add(name, fresh, o.Attributes[report.AttrIsLearner] == 1, o)
			case report.CheckEtcdMembership:
				if v, ok := o.Attributes[report.AttrVotingMembers]; ok && fresh {
					rc.size.Report(int(v))
				}
			}
		}
	}
	return rc.judge(true)
}

// ovnDatabases are ovn-central's clustered databases, each a raft cluster.
var ovnDatabases = []string{"OVN_Northbound", "OVN_Southbound"}

// ovnCentralQuorum judges each of ovn-central's clustered databases on the
// quorum projection, from the ovn-central-member observations (one per node
// hosting a member, pinned to its OVNDatabase). The voting-member count is
// the largest raftServers a fresh member reports. It returns the worst
// effect and one component-level Quorum condition per database, pinned to
// the database. kube-ovn is observed on some fresh node when this is
// called, so a database no node reports a member of is Unknown
// (NoVotingMembers): ovn-central runs somewhere, and where is not known.
func ovnCentralQuorum(names []string, snap state.Snapshot, now time.Time, cfg Config) (report.Status, string, []Condition) {
	clusters := make(map[string]*raftCluster, len(ovnDatabases))
	for _, db := range ovnDatabases {
		clusters[db] = &raftCluster{what: "ovn-central " + db, sizeFrom: "raftServers",
			ref: &report.ResourceRef{Kind: report.KindOVNDatabase, Name: db}}
	}
	for _, name := range names {
		e := snap[name]
		fresh := !cfg.Stale(e, now)
		for _, o := range e.Observations() {
			if o.Component != report.ComponentKubeOVN || o.Check != report.CheckOVNCentralMember || o.ResourceRef == nil {
				continue
			}
			rc := clusters[o.ResourceRef.Name]
			if rc == nil {
				continue
			}
			rc.add(name, fresh, false, o)
			if v, ok := o.Attributes[report.AttrRaftServers]; ok && fresh {
				rc.size.Report(int(v))
			}
		}
	}
	worst, reason := report.StatusHealthy, ReasonQuorumHealthy
	conds := make([]Condition, 0, len(ovnDatabases))
	for _, db := range ovnDatabases {
		effect, cs := clusters[db].judge(false)
		q := cs[0]
		if q.Reason == ReasonNoVotingMembers {
			q.Message = fmt.Sprintf("ovn-central %s: no node reports a member (the agents' --ovn-nb-ctl/--ovn-sb-ctl sockets and --ovn-db-dir files); its quorum is unknown", db)
		}
		if effect.Rank() > worst.Rank() {
			worst, reason = effect, q.Reason
		}
		conds = append(conds, q)
	}
	return worst, reason, conds
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

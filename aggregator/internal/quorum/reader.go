package quorum

import (
	"fmt"
	"slices"

	"github.com/cozystack/cozy-health/aggregator/internal/state"
	"github.com/cozystack/cozy-health/pkg/report"
)

// The one reader of raft facts: ClaimsOf extracts what a report claims
// about the raft clusters, Read turns every node's claims into a View of
// one cluster under the trust rules below. The rollup's projections, the
// rollup cache and the drain rules all read raft facts through it, so they
// cannot disagree on what a report says, on what is believed, or on which
// facts a change of judgement can hinge on.
//
// Trust (a node speaks only about itself):
//   - member, size and alarm claims are accepted only from nodes whose
//     Node object is labelled control-plane (state.RoleControlPlane); the
//     label is one NodeRestriction refuses from kubelets. ovn-central is
//     judged by the same label: Cozystack sets kube-ovn's
//     MASTER_NODES_LABEL to node-role.kubernetes.io/control-plane, while
//     kube-ovn's own default (kube-ovn/role=master) is a label a kubelet
//     may set on itself;
//   - at most one member per node per cluster: a report with two member
//     claims for one cluster has its member claims for it rejected, and its
//     member reads Unknown;
//   - the cluster size is never smaller than the voting members the view
//     lists (View.Seen: every accepted non-learner member, of any node's
//     report at any age, and for etcd one per control-plane node): a size
//     claim below that is rejected (below_members_seen) and takes no part
//     in the majority, so one compromised control-plane node (or two of
//     five) cannot shrink the cluster to make its own healthy member a
//     quorum while the others are Down or silent;
//   - the cluster size is the value a strict majority of the remaining
//     fresh accepted size claims agree on; without a majority the size is
//     Disputed: the largest claim is used, and quorum loss is never
//     proven on it; with no claim left it is Seen (Counted).
// Every rejection is returned in View.Rejected for the caller to count and
// log (Auditor).

// Cluster names.
const (
	// Etcd is the management etcd cluster.
	Etcd = "etcd"
	// OVNNorthbound and OVNSouthbound are ovn-central's clustered databases
	// (the ResourceRef name of their ovn-central-member observations).
	OVNNorthbound = "OVN_Northbound"
	OVNSouthbound = "OVN_Southbound"
)

// OVNDatabases are ovn-central's clustered databases, each a raft cluster.
var OVNDatabases = []string{OVNNorthbound, OVNSouthbound}

// Reasons the reader reads or writes.
const (
	// ReasonAlarmNOSPACE is the agent's reason for an etcd NOSPACE alarm
	// (etcd-member and etcd-alarms): etcd refuses writes cluster-wide.
	ReasonAlarmNOSPACE = "AlarmNOSPACE"
	// ReasonMemberJoining is ovn-central's reason for a server still
	// joining: it is not in the cluster's configuration and does not vote.
	ReasonMemberJoining = "MemberJoining"
	// ReasonNoMemberObservation: a control-plane node reports, but no
	// member observation of the cluster (its checks did not run or were
	// dropped as not applicable).
	ReasonNoMemberObservation = "NoMemberObservation"
	// ReasonClaimRejected: the node's member claims were rejected (see
	// Rejection).
	ReasonClaimRejected = "ClaimRejected"
	// ReasonRoleUnknown is the Rejection reason of a claim from a node
	// whose Node object has not been seen (its role is not known).
	ReasonRoleUnknown = "role_unknown"
	// ReasonBelowMembersSeen is the Rejection reason of a size claim
	// (etcd-membership's votingMembers, ovn-central's raftServers) smaller
	// than the voting members the view lists (View.Seen).
	ReasonBelowMembersSeen = "below_members_seen"
)

// Attributes are every observation attribute ClaimsOf reads. The rollup
// cache keys on ClaimsOf itself (Claims.Equal), so a new fact read here
// cannot be forgotten there; this list documents them.
var Attributes = []string{report.AttrIsLearner, report.AttrVotingMembers, report.AttrRaftServers}

// Claim is one member observation of a raft cluster.
type Claim struct {
	Learner bool
	Status  report.Status
	Reason  string
}

// clusterClaims are a report's claims about one cluster.
type clusterClaims struct {
	members []Claim
	sizes   []int
}

func (c clusterClaims) equal(o clusterClaims) bool {
	return slices.Equal(c.members, o.members) && slices.Equal(c.sizes, o.sizes)
}

// Claims are what one report claims about the raft clusters. The zero
// value claims nothing.
type Claims struct {
	etcd clusterClaims
	ovn  [2]clusterClaims // by OVNDatabases index
	// alarms are the etcd-alarms observations (cluster-wide alarms).
	alarms []Claim
	// OVNUnknown: the ovn-central-member check read Unknown as a whole (no
	// database named): whether the node hosts a member is not known.
	OVNUnknown bool
	// KubeOVN: the report observes kube-ovn at all.
	KubeOVN bool
}

// Equal tells whether two reports claim the same about every raft cluster.
func (c *Claims) Equal(o *Claims) bool {
	if c == nil || o == nil {
		return c == o
	}
	return c.etcd.equal(o.etcd) && c.ovn[0].equal(o.ovn[0]) && c.ovn[1].equal(o.ovn[1]) &&
		slices.Equal(c.alarms, o.alarms) && c.OVNUnknown == o.OVNUnknown && c.KubeOVN == o.KubeOVN
}

func (c *Claims) cluster(name string) *clusterClaims {
	switch name {
	case Etcd:
		return &c.etcd
	case OVNNorthbound:
		return &c.ovn[0]
	case OVNSouthbound:
		return &c.ovn[1]
	}
	return nil
}

// ClaimsOf extracts r's raft claims; nil r claims nothing.
func ClaimsOf(r *report.NodeReport) *Claims {
	c := &Claims{}
	if r == nil {
		return c
	}
	for i := range r.Observations {
		o := &r.Observations[i]
		if o.Component == report.ComponentKubeOVN {
			c.KubeOVN = true
		}
		switch {
		case o.Component == report.ComponentEtcd && o.Check == report.CheckEtcdMember:
			c.etcd.members = append(c.etcd.members, Claim{Learner: o.Attributes[report.AttrIsLearner] == 1, Status: o.Status, Reason: o.Reason})
		case o.Component == report.ComponentEtcd && o.Check == report.CheckEtcdMembership:
			if v, ok := o.Attributes[report.AttrVotingMembers]; ok {
				c.etcd.sizes = append(c.etcd.sizes, int(v))
			}
		case o.Component == report.ComponentEtcd && o.Check == report.CheckEtcdAlarms:
			c.alarms = append(c.alarms, Claim{Status: o.Status, Reason: o.Reason})
		case o.Component == report.ComponentKubeOVN && o.Check == report.CheckOVNCentralMember && o.ResourceRef == nil:
			c.OVNUnknown = c.OVNUnknown || o.Status == report.StatusUnknown
		case o.Component == report.ComponentKubeOVN && o.Check == report.CheckOVNCentralMember:
			cc := c.cluster(o.ResourceRef.Name)
			if cc == nil {
				continue
			}
			cc.members = append(cc.members, Claim{Learner: o.Reason == ReasonMemberJoining, Status: o.Status, Reason: o.Reason})
			if v, ok := o.Attributes[report.AttrRaftServers]; ok {
				cc.sizes = append(cc.sizes, int(v))
			}
		}
	}
	return c
}

// Node is one node as the reader sees it.
type Node struct {
	Name string
	Role state.Role
	// Reported: the node has a report (Claims are its claims).
	Reported bool
	// Fresh: the node is within its heartbeat grace.
	Fresh  bool
	Claims *Claims
}

// Class is how a member counts for quorum.
type Class uint8

const (
	// Votes: Healthy.
	Votes Class = iota + 1
	// Warns: votes, but warns (Degraded: DB near quota, member errors):
	// counts for quorum and makes the component Degraded.
	Warns
	// NoSpace: votes, under etcd's NOSPACE alarm (cluster-wide, its own
	// verdict, never a lost member).
	NoSpace
	// CannotVote: a lost member (Down: not running, no leader,
	// unreachable, a CORRUPT alarm).
	CannotVote
	// Unknown: not known (Unknown, stale, no observation, rejected claims).
	Unknown
)

// Classify is how a fresh, accepted member observation counts.
func Classify(st report.Status, reason string) Class {
	switch {
	case reason == ReasonAlarmNOSPACE:
		return NoSpace
	case st == report.StatusHealthy:
		return Votes
	case st == report.StatusDegraded:
		return Warns
	case st == report.StatusDown:
		return CannotVote
	}
	return Unknown
}

// Counts reports whether the class counts as voting for quorum.
func (c Class) Counts() bool { return c == Votes || c == Warns || c == NoSpace }

// Member is one node's member of a cluster as the reader believes it.
type Member struct {
	Node    string
	Learner bool
	Class   Class
	// Status and Reason are the member observation's, or, for a member
	// whose health is not known from it, Unknown and why
	// (HeartbeatMissed, NoMemberObservation, ClaimRejected).
	Status report.Status
	Reason string
}

// Rejection is one claim the reader did not believe.
type Rejection struct {
	Node string
	// Kind: etcd-member, etcd-membership, etcd-alarms, ovn-central-member.
	Kind string
	// Reason: not_control_plane, role_unknown, duplicate_member,
	// duplicate_size (a report with more than one size claim),
	// below_members_seen (a size claim smaller than the voting members
	// the view lists, ReasonBelowMembersSeen).
	Reason string
}

// View is what the reader believes of one raft cluster.
type View struct {
	Cluster string
	// Members are the accepted members, voting and learners, in the
	// order of the nodes given to Read; for etcd also one Unknown member
	// per control-plane node that has no member claim.
	Members []Member
	// Voting is the cluster's voting-member count, from Source.
	Voting int
	Source Source
	// Sizes are the fresh accepted size claims (sorted); claims below
	// Seen are not among them.
	Sizes []int
	// Below are the fresh size claims rejected as smaller than Seen
	// (sorted), for messages.
	Below []int
	// Candidates are control-plane nodes that report but claim no member
	// of an ovn-central database: where a member no node reports may be.
	Candidates []string
	// NoSpace is how many fresh accepted nodes report etcd's NOSPACE
	// alarm, of AlarmReporters that report etcd's alarms at all.
	NoSpace, AlarmReporters int
	// Rejected are the claims not believed.
	Rejected []Rejection
}

// Seen is the number of voting members the view lists.
func (v *View) Seen() int {
	n := 0
	for _, m := range v.Members {
		if !m.Learner {
			n++
		}
	}
	return n
}

// Missing is how many voting members no node's member describes.
func (v *View) Missing() int { return max(v.Voting-v.Seen(), 0) }

// Member returns node's member, if the view lists one.
func (v *View) Member(node string) (Member, bool) {
	for _, m := range v.Members {
		if m.Node == node {
			return m, true
		}
	}
	return Member{}, false
}

// NoSpaceAgreed tells whether a strict majority of the nodes that report
// etcd's alarms report NOSPACE: etcd refuses writes cluster-wide. One
// node's claim alone, beside others that report no alarm, is not enough.
func (v *View) NoSpaceAgreed() bool { return v.NoSpace > 0 && 2*v.NoSpace > v.AlarmReporters }

// Count is the view's Count: members that vote (Votes, Warns, NoSpace)
// are healthy, CannotVote ones bad, the rest unknown.
func (v *View) Count() Count {
	c := Count{Voting: v.Voting, Disputed: v.Source == Disputed}
	for _, m := range v.Members {
		if m.Learner {
			continue
		}
		switch {
		case m.Class.Counts():
			c.Healthy++
		case m.Class == CannotVote:
			c.Bad++
		}
	}
	return c
}

func kindOf(cluster string) string {
	if cluster == Etcd {
		return report.CheckEtcdMember
	}
	return report.CheckOVNCentralMember
}

// Read builds the View of cluster (Etcd or one of OVNDatabases) from
// nodes, in their order.
func Read(cluster string, nodes []Node) View {
	v := View{Cluster: cluster}
	kind := kindOf(cluster)
	type sizeClaim struct {
		node string
		n    int
	}
	var claimed []sizeClaim
	for _, n := range nodes {
		if n.Claims == nil {
			n.Claims = &Claims{}
		}
		cc := n.Claims.cluster(cluster)
		if cc == nil {
			continue
		}
		if n.Role != state.RoleControlPlane {
			reason := "not_control_plane"
			if n.Role == state.RoleUnknown {
				reason = ReasonRoleUnknown
			}
			if len(cc.members) > 0 {
				v.Rejected = append(v.Rejected, Rejection{Node: n.Name, Kind: kind, Reason: reason})
			}
			if len(cc.sizes) > 0 && cluster == Etcd {
				v.Rejected = append(v.Rejected, Rejection{Node: n.Name, Kind: report.CheckEtcdMembership, Reason: reason})
			}
			if cluster == Etcd && len(n.Claims.alarms) > 0 {
				v.Rejected = append(v.Rejected, Rejection{Node: n.Name, Kind: report.CheckEtcdAlarms, Reason: reason})
			}
			continue
		}
		if n.Reported && n.Fresh {
			switch len(cc.sizes) {
			case 0:
			case 1:
				claimed = append(claimed, sizeClaim{n.Name, cc.sizes[0]})
			default:
				v.Rejected = append(v.Rejected, Rejection{Node: n.Name, Kind: sizeKind(cluster), Reason: "duplicate_size"})
			}
			if cluster == Etcd {
				v.alarms(n)
			}
		}
		switch {
		case len(cc.members) > 1:
			v.Rejected = append(v.Rejected, Rejection{Node: n.Name, Kind: kind, Reason: "duplicate_member"})
			v.Members = append(v.Members, Member{Node: n.Name, Class: Unknown, Status: report.StatusUnknown, Reason: ReasonClaimRejected})
		case len(cc.members) == 1:
			c := cc.members[0]
			m := Member{Node: n.Name, Learner: c.Learner, Class: Classify(c.Status, c.Reason), Status: c.Status, Reason: c.Reason}
			if !n.Fresh {
				m.Class, m.Status, m.Reason = Unknown, report.StatusUnknown, report.ReasonHeartbeatMissed
			}
			v.Members = append(v.Members, m)
		case cluster == Etcd:
			// Every Talos control-plane node runs an etcd member: one that
			// does not say how it is is an unknown member, never none.
			reason := ReasonNoMemberObservation
			switch {
			case !n.Reported:
				reason = report.ReasonNoData
			case !n.Fresh:
				reason = report.ReasonHeartbeatMissed
			}
			v.Members = append(v.Members, Member{Node: n.Name, Class: Unknown, Status: report.StatusUnknown, Reason: reason})
		case n.Reported && n.Claims.KubeOVN:
			v.Candidates = append(v.Candidates, n.Name)
		}
	}
	// The members are settled: a size claim below the voting members they
	// list cannot be true of the cluster they were read from. Counting
	// more voting members than there are can only make the verdict less
	// green (more members needed for quorum, more unknown ones), never
	// falsely green. Its honest cost is rare and shows as red, never as
	// green: a control-plane node whose member was removed from etcd (or
	// that has not yet joined, before it reports itself a learner) while
	// its agent still reports is counted as one more voting member, so
	// the others' true claims are rejected and etcd reads Degraded (or
	// Down, if its member is reported lost and enough others are too)
	// until the node is gone or joined.
	seen := v.Seen()
	var sizes []int
	for _, c := range claimed {
		if c.n < seen {
			v.Rejected = append(v.Rejected, Rejection{Node: c.node, Kind: sizeKind(cluster), Reason: ReasonBelowMembersSeen})
			v.Below = append(v.Below, c.n)
			continue
		}
		sizes = append(sizes, c.n)
	}
	slices.Sort(sizes)
	slices.Sort(v.Below)
	v.Sizes = sizes
	switch voting, ok := agreed(sizes); {
	case len(sizes) == 0:
		v.Voting, v.Source = seen, Counted
	case ok:
		v.Voting, v.Source = voting, Reported
	default:
		v.Voting, v.Source = sizes[len(sizes)-1], Disputed
	}
	// Every accepted claim is at least seen, so this only guards the rule
	// (never fewer voting members than listed) against a change above: a
	// count raised to the members is Counted, not Reported.
	if v.Voting < seen {
		v.Voting, v.Source = seen, Counted
	}
	return v
}

func sizeKind(cluster string) string {
	if cluster == Etcd {
		return report.CheckEtcdMembership
	}
	return report.CheckOVNCentralMember
}

// alarms records a fresh accepted node's etcd alarm claims: its
// etcd-alarms observation, or its member's own NOSPACE alarm.
func (v *View) alarms(n Node) {
	nospace, reports := false, false
	for _, a := range n.Claims.alarms {
		if a.Status != report.StatusUnknown {
			reports = true
		}
		nospace = nospace || a.Reason == ReasonAlarmNOSPACE
	}
	for _, m := range n.Claims.etcd.members {
		if m.Reason == ReasonAlarmNOSPACE {
			nospace, reports = true, true
		}
	}
	if reports {
		v.AlarmReporters++
	}
	if nospace {
		v.NoSpace++
	}
}

// agreed is the value a strict majority of sizes holds.
func agreed(sizes []int) (int, bool) {
	for i := 0; i < len(sizes); {
		j := i
		for j < len(sizes) && sizes[j] == sizes[i] {
			j++
		}
		if 2*(j-i) > len(sizes) {
			return sizes[i], true
		}
		i = j
	}
	return 0, false
}

// SizeNote says where v's voting-member count came from, for messages:
// what names the reported count ("etcd-membership", "raftServers"). Size
// claims rejected as below the members listed are named with it.
func (v *View) SizeNote(what string) string {
	var note string
	switch v.Source {
	case Reported:
		note = what
	case Disputed:
		note = fmt.Sprintf("%s, disputed: %v, no majority; the largest, loss never proven", what, v.Sizes)
	default:
		note = "counted member observations"
	}
	if len(v.Below) > 0 {
		note += fmt.Sprintf("; %s below the %d voting members listed, rejected: %v", what, v.Seen(), v.Below)
	}
	return note
}

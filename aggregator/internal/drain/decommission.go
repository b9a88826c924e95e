package drain

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/cozystack/cozy-health/aggregator/internal/quorum"
	"github.com/cozystack/cozy-health/aggregator/internal/state"
	"github.com/cozystack/cozy-health/pkg/linstorapi"
	"github.com/cozystack/cozy-health/pkg/report"
)

// Rule names of the decommission rules (DecommissionRules).
const (
	RuleRaftMemberRemoved  = "raft-member-removed"
	RuleLinstorReplaceable = "linstor-replaceable"
)

var (
	_ Rule = raftMemberRemovedRule{}
	_ Rule = linstorReplaceableRule{}
)

// raftMemberRemovedRule: a node that does not come back must not hold a
// member of etcd or of an ovn-central database (NB, SB): a member left in
// the configuration of a node that is gone counts in every quorum from then
// on and never votes again. Membership is what the raft reader believes
// (quorum.Read): a member is listed for every control-plane node (etcd) or
// as its agent reports it (ovn-central). A member that still votes blocks;
// one that no longer runs is read as removed only when the other members'
// own lists prove it (removedByLists), else its membership is unknown.
type raftMemberRemovedRule struct{}

func (raftMemberRemovedRule) Name() string { return RuleRaftMemberRemoved }

func (raftMemberRemovedRule) Check(node string, s *Snapshot, now time.Time) []Reason {
	ev := s.view(quorum.Etcd, now)
	out := []Reason{memberRemoved(report.ComponentEtcd, "etcd", nil, &ev, node, s)}
	reason := func(v Verdict, format string, args ...any) Reason {
		return Reason{Rule: RuleRaftMemberRemoved, Component: report.ComponentKubeOVN, Verdict: v, Message: fmt.Sprintf(format, args...)}
	}
	views := make([]quorum.View, len(quorum.OVNDatabases))
	members := 0
	for i, db := range quorum.OVNDatabases {
		views[i] = s.view(db, now)
		members += len(views[i].Members)
	}
	n := s.nodes[node]
	switch {
	case n.Role == state.RoleWorker:
		return append(out, reason(Safe, "kube-ovn: %s holds no ovn-central member: it is not a control-plane node (no %s label), and members are believed only there", node, state.LabelControlPlane))
	case n.LastReport == nil:
		return append(out, reason(Unknown, "kube-ovn: whether %s still holds an ovn-central member is unknown: its agent never reported", node))
	case len(s.kubeOVN) == 0 && members == 0:
		return append(out, reason(Safe, "kube-ovn: no node observes kube-ovn (no ovs-ovn, no ovn-central member), %s included", node))
	case s.facts[node] != nil && s.facts[node].claims.OVNUnknown:
		return append(out, reason(Unknown, "kube-ovn: whether %s still holds an ovn-central member is unknown: its ovn-central-member check reads Unknown", node))
	}
	for i, db := range quorum.OVNDatabases {
		ref := &report.ResourceRef{Kind: report.KindOVNDatabase, Name: db}
		if len(views[i].Members) == 0 {
			r := reason(Unknown, "kube-ovn: kube-ovn runs (observed on %d node(s)) but no control-plane node reports an ovn-central %s member: whether %s still holds one is unknown", len(s.kubeOVN), db, node)
			r.ResourceRef = ref
			out = append(out, r)
			continue
		}
		out = append(out, memberRemoved(report.ComponentKubeOVN, "kube-ovn ovn-central "+db, ref, &views[i], node, s))
	}
	return out
}

// memberRemoved judges whether target still holds a member of the raft
// cluster v (what names it in messages).
func memberRemoved(component, what string, ref *report.ResourceRef, v *quorum.View, target string, s *Snapshot) Reason {
	r := Reason{Rule: RuleRaftMemberRemoved, Component: component, ResourceRef: ref}
	n := s.nodes[target]
	m, isMember := v.Member(target)
	switch {
	case n.Role == state.RoleWorker:
		r.Verdict, r.Message = Safe, fmt.Sprintf("%s: %s holds no member: it is not a control-plane node (no %s label), and members are believed only there", what, target, state.LabelControlPlane)
	case n.Role == state.RoleUnknown:
		r.Verdict, r.Message = Unknown, fmt.Sprintf("%s: whether %s still holds a member is unknown: no Node object says its role", what, target)
	case !isMember && v.Missing() > 0:
		r.Verdict = Unknown
		r.Message = fmt.Sprintf("%s: %s reports no member, but %d of %d voting members are on no reporting node: one may be its", what, target, v.Missing(), v.Voting)
	case !isMember:
		r.Verdict = Safe
		r.Message = fmt.Sprintf("%s: %s holds no member (as of its report of %s); all %d voting members are on other nodes", what, target, n.LastHeard.UTC().Format(time.RFC3339), v.Voting)
	case m.Class.Counts():
		kind := "voting member"
		if m.Learner {
			kind = "member (a learner)"
		}
		r.Verdict = Blocked
		r.Message = fmt.Sprintf("%s: %s still holds a %s (%s, %s): remove the member first; a node that does not come back leaves its member in the cluster's configuration, counted in every quorum and never voting again",
			what, target, kind, m.Status, m.Reason)
		if component == report.ComponentEtcd {
			r.Message += fmt.Sprintf(" (on Talos: talosctl -n %s etcd leave)", target)
		}
	case m.Class == quorum.CannotVote && !m.Learner:
		if ok, why := removedByLists(v, target); ok {
			r.Verdict, r.Message = Safe, fmt.Sprintf("%s: %s's member no longer runs (%s, %s) and %s: it is removed", what, target, m.Status, m.Reason, why)
		} else {
			r.Verdict, r.Message = Unknown, fmt.Sprintf("%s: %s's member no longer runs (%s, %s), but whether it is removed from the cluster is not proven: %s", what, target, m.Status, m.Reason, why)
		}
	case presumed(m):
		r.Verdict, r.Message = Unknown, fmt.Sprintf("%s: whether %s still holds a member is unknown: %s", what, target, unknownWhy(what, m))
	default:
		r.Verdict, r.Message = Unknown, fmt.Sprintf("%s: whether %s still holds a member is unknown: its member reads %s (%s)", what, target, m.Status, m.Reason)
	}
	return r
}

// removedByLists tells whether the members' own lists prove that every
// listed voting member that cannot vote, target's among them, is removed:
// the size claims (each a member's own list of voting members) agree on V'
// in a strict majority of the fresh claims and in at least a quorum of the
// listed voting members, and those number V' plus exactly the ones that
// cannot vote, none of them unknown. A member that votes is in the list
// (it votes), so the ones out of it are the ones that do not; one lying
// node cannot make it so while a quorum of honest members lists it.
func removedByLists(v *quorum.View, target string) (bool, string) {
	seen := v.Seen()
	down, unknown := 0, 0
	var notVoting []string
	for _, m := range v.Members {
		switch {
		case m.Learner:
		case m.Class == quorum.CannotVote:
			down++
			notVoting = append(notVoting, m.Node)
		case !m.Class.Counts():
			unknown++
			if m.Node != target {
				notVoting = append(notVoting, m.Node+" Unknown")
			}
		}
	}
	claims := append(append([]int{}, v.Sizes...), v.Below...)
	want := seen - down
	agree := 0
	for _, c := range claims {
		if c == want {
			agree++
		}
	}
	switch {
	case len(claims) == 0:
		return false, "no member reports its list of members"
	case unknown > 0:
		return false, fmt.Sprintf("members whose state is unknown (%s) may be the ones removed", strings.Join(notVoting, ", "))
	case want <= 0 || 2*agree <= len(claims) || agree < quorum.Needed(seen):
		return false, fmt.Sprintf("the members' lists report %v voting members; %d listed, %d of them not running (%s): it is removed only if a majority list %d",
			claims, seen, down, strings.Join(notVoting, ", "), want)
	}
	return true, fmt.Sprintf("%d of %d members' lists count %d voting members, the %d listed less the %d not running (%s)", agree, len(claims), want, seen, down, strings.Join(notVoting, ", "))
}

// linstorReplaceableRule: every LINSTOR resource with a data replica on a
// node that does not come back must be re-placeable: after its replica is
// removed, the resource keeps its diskful replica count (the resource
// group's place count is not in the drain's view: the count it has is
// taken as the one to keep) on satellites that can take a replica now: a
// Kubernetes Node that stays (not the target, not cordoned, its agent
// fresh), holding no diskful replica of the resource, whose satellite the
// controller sees ONLINE, with a storage pool of the target replica's
// pool name. Diskless replicas (DRBD clients, tie-breakers) hold no data:
// nothing to re-place. A storage-only volume (no DRBD layer) lives only on
// the target: a decommission loses it.
//
// What the view lacks, the rule does not guess: the controller's view has
// no free capacity of the pools (and no pool of a satellite that holds no
// replica), so a resource with enough candidate satellites is unknown
// ("room not known"), never safe; without any possible candidate it is
// blocked. On the agents' reports (no controller view) no satellite or
// pool is known: unknown at best.
type linstorReplaceableRule struct{}

func (linstorReplaceableRule) Name() string { return RuleLinstorReplaceable }

// candidates are the nodes that could take a new replica of one resource.
type candidates struct {
	// sure are certainly able to take it but for room; maybe could be.
	sure, maybe []string
}

// satelliteFacts are what the controller's view says of one node's
// satellite: its connection status and the storage pools its diskful
// replicas are in (a node that holds no replica is not in the view).
type satelliteFacts struct {
	inView    bool
	satellite string
	pools     map[string]bool
}

func (s *Snapshot) satellite(node string) satelliteFacts {
	f := satelliteFacts{pools: map[string]bool{}}
	if s.ctl == nil {
		return f
	}
	for _, d := range s.ctl.byNode[node] {
		f.inView = true
		if d.rep.lin == nil {
			continue
		}
		f.satellite = d.rep.lin.Satellite
		if !d.rep.lin.Diskless && d.rep.lin.Pool != "" {
			f.pools[d.rep.lin.Pool] = true
		}
	}
	return f
}

// placeFor lists the candidates for a replica of res in pool, other than
// target and the nodes in holding.
func placeFor(target, pool string, holding map[string]bool, s *Snapshot, now time.Time) candidates {
	var c candidates
	names := make([]string, 0, len(s.nodes))
	for name := range s.nodes {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if name == target || holding[name] {
			continue
		}
		n := s.nodes[name]
		if !n.Exists {
			continue // not a Kubernetes Node: no satellite of the cluster
		}
		if s.ctl == nil {
			c.maybe = append(c.maybe, name+" (satellite and pools not known without the controller's view)")
			continue
		}
		sat := s.satellite(name)
		lv, why := s.liveness(name, now)
		switch {
		case !sat.inView:
			c.maybe = append(c.maybe, name+" (holds no replica: its satellite and pools are not in the view)")
		case linstorapi.ClassOf(sat.satellite) == linstorapi.SatelliteOffline || linstorapi.ClassOf(sat.satellite) == linstorapi.SatelliteRefused:
			// Cannot take a replica now.
		case linstorapi.ClassOf(sat.satellite) != linstorapi.SatelliteServing:
			c.maybe = append(c.maybe, fmt.Sprintf("%s (satellite %q)", name, sat.satellite))
		case lv != live:
			c.maybe = append(c.maybe, name+" ("+why+")")
		case pool != "" && !sat.pools[pool]:
			c.maybe = append(c.maybe, fmt.Sprintf("%s (no replica in storage pool %q: whether it has one is not in the view)", name, pool))
		default:
			c.sure = append(c.sure, name)
		}
	}
	return c
}

// dataless tells whether r is flagged diskless (a DRBD client or a
// tie-breaker): it takes no place of the resource's data. A diskful
// replica whose disk detached still does.
func dataless(r replica) bool {
	if r.lin != nil {
		return r.lin.Diskless
	}
	return r.diskless
}

func (linstorReplaceableRule) Check(node string, s *Snapshot, now time.Time) []Reason {
	reason := func(v Verdict, res string, format string, args ...any) Reason {
		r := Reason{Rule: RuleLinstorReplaceable, Component: report.ComponentLinstor, Verdict: v, Message: fmt.Sprintf(format, args...)}
		if res != "" {
			r.ResourceRef = &report.ResourceRef{Kind: report.KindResource, Name: res}
		}
		return r
	}
	if why := drbdUnknownWhy(node, s); why != "" {
		return []Reason{reason(Unknown, "", "linstor: which DRBD resources %s holds is unknown: %s", node, why)}
	}
	resources := s.resources(node)
	var out []Reason
	diskless := 0
	for _, d := range resources {
		res := d.resource
		reps := s.replicas(res)
		holding := map[string]bool{}
		diskful, pool := 0, ""
		var target replica
		for _, r := range reps {
			if r.node == node {
				target = r
			}
			if !dataless(r) {
				diskful++
				holding[r.node] = true
			}
		}
		if target.lin != nil {
			pool = target.lin.Pool
		}
		switch {
		case target.lin != nil && target.lin.StorageOnly:
			out = append(out, reason(Blocked, res, "linstor: %s of %s is storage-only (no DRBD layer) in storage pool %q: its data lives only on %s, and a decommission loses it; move it first",
				res, node, target.lin.Pool, node))
			continue
		case dataless(target):
			diskless++
			continue
		}
		c := placeFor(node, pool, holding, s, now)
		attrs := map[string]float64{AttrReplicas: float64(diskful), "candidates": float64(len(c.sure)), "uncertainCandidates": float64(len(c.maybe))}
		in := ""
		if pool != "" {
			in = fmt.Sprintf(" in storage pool %q", pool)
		}
		var r Reason
		switch {
		case len(c.sure) > 0:
			r = reason(Unknown, res, "linstor: %s's replica of %s can be re-placed%s by count (%d diskful replica(s) kept) on %s (ONLINE, with the pool), but whether their pools have room is not in the drain's view of LINSTOR",
				node, res, in, diskful, strings.Join(c.sure, ", "))
		case len(c.maybe) > 0:
			r = reason(Unknown, res, "linstor: %s's replica of %s can be re-placed%s only on nodes the view says too little of: %s",
				node, res, in, strings.Join(c.maybe, ", "))
		default:
			r = reason(Blocked, res, "linstor: no other satellite can take %s's replica of %s%s: every other Kubernetes Node holds a diskful replica of it already or its satellite is not ONLINE (%d diskful replica(s) to keep); add a satellite, or reduce the resource's replicas, before the decommission",
				node, res, in, diskful)
		}
		r.Attributes = attrs
		out = append(out, r)
	}
	if len(out) == 0 {
		msg := fmt.Sprintf("linstor: %s holds no DRBD resource: nothing to re-place", node)
		if diskless > 0 {
			msg = fmt.Sprintf("linstor: %s holds only diskless replicas (%d: DRBD clients, tie-breakers): no data to re-place", node, diskless)
		}
		out = append(out, reason(Safe, "", "%s", msg))
	}
	return out
}

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

func (raftMemberRemovedRule) Judge(node string, s *Snapshot, now time.Time) []Reason {
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
// taken as the one to keep). Diskless replicas (DRBD clients,
// tie-breakers) hold no data: nothing to re-place. A storage-only volume
// (no DRBD layer) lives only on the target: a decommission loses it.
//
// A candidate for a resource's replica is certain ("sure") when it is a
// Kubernetes Node that stays (not the target, not cordoned, its agent
// fresh), holds no diskful replica of the resource, its satellite is
// ONLINE (/v1/nodes), and it has a storage pool of the target replica's
// pool name (/v1/view/storage-pools) that takes data (not DISKLESS) and
// whose room covers the replica: the sizes of its volumes, summed, as
// their STORAGE layers have them in /v1/view/resources
// (linstorapi.VolumeSizeKiB; the full size, whatever a thin volume has
// written). The room is:
//   - thick pool (LVM, ZFS, FILE...): free_capacity, which is what the
//     pool has not allocated;
//   - thin pool (LVM_THIN, ZFS_THIN, FILE_THIN): LINSTOR's free_capacity
//     there is the pool's unwritten space (LVM: lv_size * (1 -
//     data_percent/100), LvmUtils.getThinFreeSize of linstor-server
//     v1.33.3), and the thin volumes already in the pool grow into it as
//     they are written; LINSTOR itself over-provisions (its autoplacer
//     multiplies by an oversubscription ratio). The rule assumes the worst:
//     every volume in the pool written in full, so the room is the smaller
//     of free_capacity and total_capacity less the sizes of every diskful
//     replica the view places in that pool on that node. Thin snapshots
//     and replicas being deleted are not in that sum (the view has no
//     snapshots, and linstorapi.Replicas drops replicas flagged DELETE):
//     what they have written is in free_capacity, what they may still
//     write is not.
//
// Resources are judged in name order, each handed to the sure candidate
// with the most room left (ties: the first by name), and the room handed
// out is counted against that node's pool for the resources after it: two
// replicas land on one node only when its pool has room for both.
//
// A resource is safe when a sure candidate has room. It is unknown when
// only uncertain ("maybe") candidates remain: a satellite connecting or in
// an unclear state, a node cordoned (LINSTOR does not read cordons) or its
// agent stale, the pools or the replica's size not in the view, a pool
// with no free capacity reported or an error report, a thin pool whose
// free space covers the replica but not if its volumes grow, or whose free
// space is short of the full size (a resync of thin storage may write
// less), or a pool whose room went to the resources judged before. It is
// blocked when no candidate is left at all: every other Kubernetes Node
// holds a diskful replica already, has no satellite or no pool of that
// name (or a DISKLESS one), its satellite is OFFLINE or refused, or its
// thick pool is short of room. On the agents' reports (no controller view)
// no satellite or pool is known: unknown at best.
type linstorReplaceableRule struct{}

func (linstorReplaceableRule) Name() string { return RuleLinstorReplaceable }

// candidates are the nodes that could take a new replica of one resource.
type candidates struct {
	// sure counts the nodes that could certainly take it, best the one
	// with the most room; maybe lists those that could possibly, each
	// with why not certainly; out those that cannot, each with why. Each
	// list names the first maxListed nodes and counts the rest.
	sure       int
	best       place
	maybe, out []string
	maybeMore  int
	outMore    int
}

// place is a sure candidate: its pool's free capacity as LINSTOR reports
// it, the room left for this replica (KiB) and what earlier resources of
// the same check were handed of it.
type place struct {
	node               string
	free, room, handed int64
}

// maxListed bounds the nodes a reason names.
const maxListed = 5

func (c *candidates) exclude(format string, args ...any) {
	if len(c.out) < maxListed {
		c.out = append(c.out, fmt.Sprintf(format, args...))
		return
	}
	c.outMore++
}

func (c *candidates) uncertain(format string, args ...any) {
	if len(c.maybe) < maxListed {
		c.maybe = append(c.maybe, fmt.Sprintf(format, args...))
		return
	}
	c.maybeMore++
}

// listed joins a list and the count of the rest.
func listed(l []string, more int, sep string) string {
	out := strings.Join(l, sep)
	if more > 0 {
		out += fmt.Sprintf("%sand %d more", sep, more)
	}
	return out
}

// satellite returns node's satellite connection status as the view says
// it: from /v1/nodes when read ("" with known: the controller has no such
// satellite), else from the node's replicas (known false when it holds
// none).
func (s *Snapshot) satellite(node string) (status string, known bool) {
	if s.ctl == nil {
		return "", false
	}
	if s.ctl.satellites != nil {
		return s.ctl.satellites[node], true
	}
	for _, d := range s.ctl.byNode[node] {
		if d.rep.lin != nil {
			return d.rep.lin.Satellite, true
		}
	}
	return "", false
}

// gib renders a size in KiB.
func gib(kib int64) string {
	if kib < 1<<20 {
		return fmt.Sprintf("%.1f MiB", float64(kib)/(1<<10))
	}
	return fmt.Sprintf("%.1f GiB", float64(kib)/(1<<20))
}

// nodeCand is a node as a candidate for any resource, by what its Node,
// its agent and its satellite say: ok, it can take a replica if its pools
// have room; else maybe (why says why) or not at all (why says why).
type nodeCand struct {
	name      string
	ok, maybe bool
	why       string
}

// nodeCandidates classifies every Kubernetes Node of names (sorted) but
// target, once per check.
func nodeCandidates(target string, names []string, x *roomIndex, s *Snapshot, now time.Time) []nodeCand {
	out := make([]nodeCand, 0, len(names))
	for _, name := range names {
		if name == target || !s.nodes[name].Exists {
			continue // not a Kubernetes Node: no satellite of the cluster
		}
		c := nodeCand{name: name}
		if s.ctl == nil {
			c.maybe, c.why = true, name+" (satellite and pools not known without the controller's view)"
			out = append(out, c)
			continue
		}
		st, known := s.satellite(name)
		lv, why := s.liveness(name, now)
		class := linstorapi.ClassOf(st)
		switch {
		case !known:
			c.maybe, c.why = true, name+" (holds no replica: its satellite and pools are not in the view)"
		case st == "":
			c.why = name + " has no LINSTOR satellite"
		case class == linstorapi.SatelliteOffline || class == linstorapi.SatelliteRefused:
			c.why = name + " satellite " + st
		case class != linstorapi.SatelliteServing:
			c.maybe, c.why = true, fmt.Sprintf("%s (satellite %q)", name, st)
		case lv != live:
			c.maybe, c.why = true, name+" ("+why+")"
		case x.pools == nil:
			c.maybe, c.why = true, name+" (ONLINE; its storage pools are not known)"
		default:
			c.ok = true
		}
		out = append(out, c)
	}
	return out
}

// poolSlot is one node's pool of one name: ok when the node has one.
type poolSlot struct {
	ok   bool
	room linstorapi.PoolRoom
	prov int64
}

// slotsOf returns the pools named pool of nodes, in their order, resolved
// once per check and pool name.
func slotsOf(pool string, nodes []nodeCand, x *roomIndex, cache map[string][]poolSlot) []poolSlot {
	if sl, ok := cache[pool]; ok {
		return sl
	}
	sl := make([]poolSlot, len(nodes))
	for i, n := range nodes {
		if !n.ok {
			continue
		}
		k := poolKey{n.name, pool}
		sl[i].room, sl[i].ok = x.pools[k]
		sl[i].prov = x.provisioned[k]
	}
	cache[pool] = sl
	return sl
}

// placeFor lists the candidates among nodes for target's replica t of
// res, other than the nodes in holding; slots are the nodes' pools of the
// replica's pool name; handed is the room already handed out per pool.
func placeFor(target, res string, t replica, nodes []nodeCand, slots []poolSlot, holding map[string]bool, handed map[poolKey]int64) candidates {
	var c candidates
	pool, need := "", int64(0)
	if t.lin != nil {
		pool, need = t.lin.Pool, t.lin.SizeKiB
	}
	for i, n := range nodes {
		name := n.name
		switch {
		case holding[name]:
			c.exclude("%s holds a diskful replica of it", name)
			continue
		case !n.ok && n.maybe:
			c.uncertain("%s", n.why)
			continue
		case !n.ok:
			c.exclude("%s", n.why)
			continue
		case pool == "" || need <= 0:
			c.uncertain("%s (ONLINE; the size of %s's replica is not in the view)", name, target)
			continue
		}
		k := poolKey{name, pool}
		p, ok := slots[i].room, slots[i].ok
		var given int64
		if len(handed) > 0 {
			given = handed[k]
		}
		switch {
		case !ok:
			c.exclude("%s has no storage pool %s", name, pool)
			continue
		case p.Class == linstorapi.PoolNoData:
			c.exclude("%s pool %s is %s (takes no data)", name, pool, p.Kind)
			continue
		case p.Class == linstorapi.PoolKindUnknown:
			c.uncertain("%s (pool %s of provider kind %q)", name, pool, p.Kind)
			continue
		case p.Error != "":
			c.uncertain("%s (pool %s reports an error: %s)", name, pool, p.Error)
			continue
		case p.FreeKiB < 0:
			c.uncertain("%s (pool %s: free capacity not reported)", name, pool)
			continue
		}
		free := p.FreeKiB - given
		room := free
		thin := p.Class == linstorapi.PoolThin
		prov := slots[i].prov
		if thin {
			if p.TotalKiB < 0 || prov < 0 {
				c.uncertain("%s (thin pool %s has %s free, %s needs %s, but what its volumes may grow to is not known)",
					name, pool, gib(p.FreeKiB), res, gib(need))
				continue
			}
			room = min(free, p.TotalKiB-prov-given)
		}
		switch {
		case room >= need:
			if c.sure == 0 || room > c.best.room {
				c.best = place{node: name, free: p.FreeKiB, room: room, handed: given}
			}
			c.sure++
		case thin && free >= need:
			c.uncertain("%s (thin pool %s has %s free, %s needs %s, but its volumes may grow into it: %s provisioned of %s)",
				name, pool, gib(p.FreeKiB), res, gib(need), gib(prov+given), gib(p.TotalKiB))
		case p.FreeKiB >= need:
			c.uncertain("%s (pool %s has %s free, %s needs %s, but %s of it is counted for the resources before)",
				name, pool, gib(p.FreeKiB), res, gib(need), gib(given))
		case thin:
			c.uncertain("%s (thin pool %s has %s free, %s needs up to %s)", name, pool, gib(p.FreeKiB), res, gib(need))
		default:
			c.exclude("%s pool %s has %s free, %s needs %s", name, pool, gib(p.FreeKiB), res, gib(need))
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

func (linstorReplaceableRule) Judge(node string, s *Snapshot, now time.Time) []Reason {
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
	var nodes []nodeCand
	var x *roomIndex
	handed := map[poolKey]int64{}
	byPool := map[string][]poolSlot{}
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
		if nodes == nil {
			if s.ctl != nil {
				x = s.ctl.roomOf(s)
			} else {
				x = &roomIndex{names: make([]string, 0, len(s.nodes))}
				for name := range s.nodes {
					x.names = append(x.names, name)
				}
				sort.Strings(x.names)
			}
			nodes = nodeCandidates(node, x.names, x, s, now)
		}
		var slots []poolSlot
		if pool != "" && x.pools != nil {
			slots = slotsOf(pool, nodes, x, byPool)
		}
		c := placeFor(node, res, target, nodes, slots, holding, handed)
		attrs := map[string]float64{AttrReplicas: float64(diskful), "candidates": float64(c.sure), "uncertainCandidates": float64(len(c.maybe) + c.maybeMore)}
		in := ""
		if pool != "" {
			in = fmt.Sprintf(" in storage pool %q", pool)
		}
		var r Reason
		switch {
		case c.sure > 0:
			best := c.best
			need := target.lin.SizeKiB
			handed[poolKey{best.node, pool}] += need
			attrs["needKiB"], attrs["freeKiB"] = float64(need), float64(best.free)
			counted := ""
			if best.handed > 0 {
				counted = fmt.Sprintf(" (%s of it counted for the resources before)", gib(best.handed))
			}
			r = reason(Safe, res, "linstor: %s's replica of %s can be re-placed%s on %s (ONLINE, %d certain candidate(s); %d diskful replica(s) kept): %s pool %s has %s free%s, %s needs %s",
				node, res, in, best.node, c.sure, diskful, best.node, pool, gib(best.free), counted, res, gib(need))
		case len(c.maybe) > 0:
			r = reason(Unknown, res, "linstor: %s's replica of %s can be re-placed%s only on nodes the view says too little of: %s",
				node, res, in, listed(c.maybe, c.maybeMore, ", "))
			if s.ctl != nil && s.ctl.poolsWhy != "" {
				r.Message += "; " + s.ctl.poolsWhy
			}
		default:
			why := "no other Kubernetes Node has a LINSTOR satellite"
			if len(c.out) > 0 {
				why = listed(c.out, c.outMore, "; ")
			}
			r = reason(Blocked, res, "linstor: no other satellite can take %s's replica of %s%s (%d diskful replica(s) to keep): %s; add a satellite or room, or reduce the resource's replicas, before the decommission",
				node, res, in, diskful, why)
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

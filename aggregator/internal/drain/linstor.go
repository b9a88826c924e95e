package drain

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cozystack/cozy-health/aggregator/internal/quorum"
	"github.com/cozystack/cozy-health/pkg/linstorapi"
	"github.com/cozystack/cozy-health/pkg/report"
)

// controllerView indexes the controller's view for the LINSTOR rules.
// When the aggregator reads the controller (Snapshot.WithPlacement, from
// drainserver.Config.Linstor), the placement and states of replicas come
// from it, not from the agents' reports: it is the aggregator's own read, so no replica claim needs
// another holder to corroborate it (each replica carries the true
// cluster-wide counts), and which resources a node holds is known even
// when its agent is silent (its liveness still comes from its agent and
// its Node).
type controllerView struct {
	// why is non-empty when the view is not current: which resources a
	// node holds is then unknown.
	why    string
	byNode map[string][]drbdFact
	byRes  map[string][]replica
	// satellites is every satellite's connection status (/v1/nodes); nil
	// when not read.
	satellites map[string]string
	// pools are every satellite's storage pools; poolsWhy says why they
	// are not known.
	pools    []linstorapi.PoolRoom
	poolsWhy string
	reps     []linstorapi.Replica

	// roomOnce builds room on its first use (linstor-replaceable, asked
	// only for a decommission), so that taking a snapshot and a reboot
	// check pay nothing for it.
	roomOnce sync.Once
	room     *roomIndex
}

// poolKey names one storage pool of one node.
type poolKey struct{ node, pool string }

// roomIndex is what linstor-replaceable reads of the pools.
type roomIndex struct {
	// names are the snapshot's nodes, sorted.
	names []string
	// pools by node and name; nil when not known (poolsWhy).
	pools map[poolKey]linstorapi.PoolRoom
	// provisioned is what the view's diskful replicas take in each
	// node's pool (KiB, their SizeKiB summed); -1 when some size is not
	// known.
	provisioned map[poolKey]int64
}

// roomOf returns the room index of s's controller view, building it once.
func (v *controllerView) roomOf(s *Snapshot) *roomIndex {
	v.roomOnce.Do(func() {
		x := &roomIndex{names: make([]string, 0, len(s.nodes)), provisioned: map[poolKey]int64{}}
		for name := range s.nodes {
			x.names = append(x.names, name)
		}
		sort.Strings(x.names)
		if v.poolsWhy == "" {
			x.pools = make(map[poolKey]linstorapi.PoolRoom, len(v.pools))
			for _, r := range v.pools {
				x.pools[poolKey{r.Node, r.Pool}] = r
			}
		}
		for _, r := range v.reps {
			if r.Diskless || r.Pool == "" {
				continue
			}
			k := poolKey{r.Node, r.Pool}
			switch {
			case x.provisioned[k] < 0:
			case r.SizeKiB <= 0:
				x.provisioned[k] = -1
			default:
				x.provisioned[k] += r.SizeKiB
			}
		}
		v.room = x
	})
	return v.room
}

func newControllerView(p linstorapi.Placement, why string) *controllerView {
	reps := p.Replicas
	v := &controllerView{why: why, byNode: map[string][]drbdFact{}, byRes: map[string][]replica{}}
	if why != "" {
		return v
	}
	v.satellites, v.pools, v.poolsWhy, v.reps = p.Satellites, p.Pools, p.PoolsWhy, p.Replicas
	all, up := map[string]int{}, map[string]int{}
	for _, r := range reps {
		all[r.Resource]++
		if r.State == "UpToDate" && r.Copy() {
			up[r.Resource]++
		}
	}
	// reps is sorted by resource, then node: byNode comes out sorted by
	// resource, as the rules' lookups expect.
	for i := range reps {
		r := &reps[i]
		rp := replica{node: r.Node, upToDate: r.State == "UpToDate" && r.Copy(), diskless: !r.Copy(),
			status: linstorapi.StatusOf(r.State), replicas: all[r.Resource], upToDateReplicas: up[r.Resource], lin: r}
		if r.State == "" {
			rp.status = report.StatusUnknown
		}
		v.byRes[r.Resource] = append(v.byRes[r.Resource], rp)
		v.byNode[r.Node] = append(v.byNode[r.Node], drbdFact{resource: r.Resource, rep: rp})
	}
	return v
}

// The LINSTOR rules on the controller's view judge each resource the
// target holds as it is without the target's replica, from first
// principles of DRBD 9:
//   - a data copy is a diskful replica with its disk attached (no
//     diskless flag, its disk not detached: linstorapi.Replica.Copy) whose
//     every volume is UpToDate, on a node that stays (a Kubernetes Node,
//     not cordoned, its agent fresh) and whose satellite is ONLINE (else
//     the controller's state of it is not current);
//   - DRBD's quorum is a strict majority of the resource's replicas,
//     diskful and diskless (tie-breakers vote), the copy itself included:
//     a copy serves only while connected to enough peers for it
//     (linstorapi.Connected, as both sides report the connection);
//   - two UpToDate copies StandAlone toward each other are a split brain:
//     each may hold writes the other lacks, so no copy is "the" copy, and
//     draining either side is blocked until an operator resolves it.
// linstor-last-replica asks whether a copy stays; linstor-quorum whether
// a copy stays connected to a quorum. Certain facts only make a drain
// safe; uncertain ones (a silent agent, a satellite not ONLINE, a
// connection neither side reports) make it unknown where they could
// change the answer, blocked where even their best case does not save
// it.

// standing is how a staying replica counts.
type standing int

const (
	// notCopy: certainly not a data copy (its kind, or a current state
	// other than UpToDate).
	notCopy standing = iota
	// maybeCopy: could be a copy: its node or its state is not certain.
	maybeCopy
	// isCopy: certainly a data copy.
	isCopy
)

// afterDrain is one resource, judged without the target's replica.
type afterDrain struct {
	target   *linstorapi.Replica
	replicas int
	need     int
	// copies / maybeCopies: staying replicas certainly / possibly copies.
	copies, maybeCopies int
	// group / groupMaybe: the largest quorum group (the copy and the
	// staying replicas connected to it) of a certain copy, counting only
	// certain connections to present replicas / of any possible copy,
	// counting every connection not known down.
	group, groupMaybe int
	// anchored: group and groupMaybe are around copies (false: no copy is
	// possible; they are around any staying replica).
	anchored bool
	// splitBrain are the staying copies in split brain with the target.
	splitBrain []string
	others     []string
}

// present tells whether a staying replica's node and facts are certain.
func present(r replica, s *Snapshot, now time.Time) (bool, string) {
	lv, why := s.liveness(r.node, now)
	switch {
	case lv == uncertain:
		return false, r.node + " " + why
	case linstorapi.ClassOf(r.lin.Satellite) != linstorapi.SatelliteServing:
		return false, fmt.Sprintf("%s satellite %q", r.node, r.lin.Satellite)
	case r.lin.State == "":
		return false, r.node + " Unknown"
	}
	return true, ""
}

func judgeAfterDrain(res, node string, s *Snapshot, now time.Time) afterDrain {
	reps := s.ctl.byRes[res]
	a := afterDrain{replicas: len(reps), need: quorum.Needed(len(reps))}
	type stay struct {
		r       replica
		present bool
		st      standing
	}
	var staying []stay
	for _, r := range reps {
		if r.node == node {
			a.target = r.lin
			continue
		}
		if lv, why := s.liveness(r.node, now); lv == gone {
			a.others = append(a.others, r.node+" "+why)
			continue
		}
		ok, why := present(r, s, now)
		st := notCopy
		switch {
		case !r.lin.Copy():
		case ok && r.lin.State == "UpToDate":
			st = isCopy
		case !ok:
			st = maybeCopy
		}
		switch {
		case st == isCopy:
			a.copies++
		case st == maybeCopy:
			a.maybeCopies++
			a.others = append(a.others, why)
		case r.lin.Detached:
			a.others = append(a.others, r.node+" detached")
		case r.lin.Copy():
			a.others = append(a.others, r.node+" "+r.lin.State)
		}
		staying = append(staying, stay{r: r, present: ok, st: st})
	}
	if a.target != nil && a.target.Copy() && a.target.State == "UpToDate" {
		for _, p := range staying {
			if linstorapi.SplitBrain(*a.target, *p.r.lin) {
				a.splitBrain = append(a.splitBrain, p.r.node)
			}
		}
	}
	a.anchored = a.copies+a.maybeCopies > 0
	for _, c := range staying {
		if a.anchored && c.st == notCopy {
			continue
		}
		sure, maybe := 1, 1
		for _, p := range staying {
			if p.r.node == c.r.node {
				continue
			}
			switch linstorapi.Connected(*c.r.lin, *p.r.lin) {
			case linstorapi.ConnectionUp:
				maybe++
				if p.present {
					sure++
				}
			case linstorapi.ConnectionNotKnown:
				maybe++
			}
		}
		if (c.st == isCopy || !a.anchored && c.present) && sure > a.group {
			a.group = sure
		}
		a.groupMaybe = max(a.groupMaybe, maybe)
	}
	return a
}

func (a afterDrain) with() string {
	if len(a.others) == 0 {
		return ""
	}
	return " (" + strings.Join(a.others, ", ") + ")"
}

// ctlLastReplica is linstor-last-replica on the controller's view.
func ctlLastReplica(node string, s *Snapshot, now time.Time) []Reason {
	var out []Reason
	resources := s.resources(node)
	for _, d := range resources {
		res := d.resource
		a := judgeAfterDrain(res, node, s, now)
		ref := &report.ResourceRef{Kind: report.KindResource, Name: res}
		attrs := map[string]float64{AttrReplicas: float64(a.replicas), AttrUpToDateAfter: float64(a.copies), AttrUncertainReplicas: float64(a.maybeCopies)}
		r := Reason{Rule: RuleLinstorLastReplica, Component: report.ComponentLinstor, ResourceRef: ref, Attributes: attrs}
		switch {
		case a.target != nil && a.target.StorageOnly:
			r.Verdict = Safe
			r.Message = fmt.Sprintf("linstor: %s of %s is storage-only (no DRBD layer) in storage pool %q: its data lives only on %s, and is unavailable while %s is drained",
				res, node, a.target.Pool, node, node)
		case len(a.splitBrain) > 0:
			r.Verdict = Blocked
			r.Message = fmt.Sprintf("linstor: %s's replica of %s is in split brain with %s (both UpToDate, StandAlone toward each other): each may hold writes the other lacks; resolve it before draining either",
				node, res, strings.Join(a.splitBrain, ", "))
		case a.copies > 0:
			continue
		case a.maybeCopies == 0:
			r.Verdict = Blocked
			r.Message = fmt.Sprintf("linstor: draining %s leaves no UpToDate copy of %s (diskful, attached, UpToDate) on the nodes that stay; %d replica(s) in all%s",
				node, res, a.replicas, a.with())
			if a.target != nil && a.target.Copy() && a.target.State == "UpToDate" {
				r.Message = fmt.Sprintf("linstor: %s holds the only UpToDate replica of %s among the nodes that stay; %d replica(s) in all%s", node, res, a.replicas, a.with())
			}
		default:
			r.Verdict = Unknown
			r.Message = fmt.Sprintf("linstor: no replica of %s that stays is certainly an UpToDate copy, %d uncertain%s", res, a.maybeCopies, a.with())
		}
		out = append(out, r)
	}
	return finishLinstor(RuleLinstorLastReplica, node, resources, out, s,
		fmt.Sprintf("linstor: each of the %d DRBD resources on %s keeps an UpToDate replica elsewhere", len(resources), node))
}

// ctlQuorum is linstor-quorum on the controller's view.
func ctlQuorum(node string, s *Snapshot, now time.Time) []Reason {
	var out []Reason
	resources := s.resources(node)
	for _, d := range resources {
		res := d.resource
		a := judgeAfterDrain(res, node, s, now)
		if (a.target != nil && a.target.StorageOnly) || a.group >= a.need {
			continue
		}
		v := Blocked
		if a.groupMaybe >= a.need {
			v = Unknown
		}
		around := "an UpToDate copy"
		if !a.anchored {
			around = "any replica (no copy stays)"
		}
		attrs := map[string]float64{AttrReplicas: float64(a.replicas), AttrQuorum: float64(a.need),
			AttrReachableAfter: float64(a.group), AttrUncertainReplicas: float64(a.groupMaybe - a.group)}
		msg := fmt.Sprintf("linstor: draining %s leaves %s with %d of %d replicas connected around %s, quorum needs %d%s", node, res, a.group, a.replicas, around, a.need, a.with())
		if v == Unknown {
			msg = fmt.Sprintf("linstor: draining %s leaves %s with %d of %d replicas certainly connected around %s (%d if the uncertain are), quorum needs %d%s",
				node, res, a.group, a.replicas, around, a.groupMaybe, a.need, a.with())
		}
		out = append(out, Reason{Rule: RuleLinstorQuorum, Component: report.ComponentLinstor, Verdict: v, Message: msg,
			ResourceRef: &report.ResourceRef{Kind: report.KindResource, Name: res}, Attributes: attrs})
	}
	return finishLinstor(RuleLinstorQuorum, node, resources, out, s,
		fmt.Sprintf("linstor: each of the %d DRBD resources on %s keeps a quorum of replicas without it", len(resources), node))
}

// finishLinstor closes a LINSTOR rule's findings: unknown when which
// resources node holds is not known, else a safe finding when nothing
// blocked.
func finishLinstor(rule, node string, resources []drbdFact, out []Reason, s *Snapshot, allSafe string) []Reason {
	if len(out) > 0 {
		return out
	}
	if why := drbdUnknownWhy(node, s); why != "" {
		return []Reason{{Rule: rule, Component: report.ComponentLinstor, Verdict: Unknown,
			Message: fmt.Sprintf("linstor: which DRBD resources %s holds is unknown: %s", node, why)}}
	}
	msg := fmt.Sprintf("linstor: %s holds no DRBD resource", node)
	if len(resources) > 0 {
		msg = allSafe
	}
	return []Reason{{Rule: rule, Component: report.ComponentLinstor, Verdict: Safe, Message: msg,
		Attributes: map[string]float64{"resources": float64(len(resources))}}}
}

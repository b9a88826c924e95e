package drain

import (
	"fmt"
	"strings"
	"time"

	"github.com/cozystack/cozy-health/aggregator/internal/quorum"
	"github.com/cozystack/cozy-health/aggregator/internal/state"
	"github.com/cozystack/cozy-health/pkg/report"
)

// Rule names.
const (
	RuleTargetData         = "node-data"
	RuleEtcdQuorum         = "etcd-quorum"
	RuleLinstorLastReplica = "linstor-last-replica"
	RuleLinstorQuorum      = "linstor-quorum"
	RuleOVNCentralQuorum   = "ovn-central-quorum"
)

var (
	_ Rule = targetDataRule{}
	_ Rule = etcdQuorumRule{}
	_ Rule = linstorLastReplicaRule{}
	_ Rule = linstorQuorumRule{}
	_ Rule = ovnCentralQuorumRule{}
)

// targetDataRule: the node's own data must be fresh; without it every
// other rule reads a past that may no longer hold.
type targetDataRule struct{}

func (targetDataRule) Name() string { return RuleTargetData }

func (targetDataRule) Judge(node string, s *Snapshot, now time.Time) []Reason {
	r := Reason{Rule: RuleTargetData, Component: report.ComponentNode, ResourceRef: &report.ResourceRef{Kind: report.KindNode, Name: node}}
	n, ok := s.nodes[node]
	switch {
	case !ok || (!n.Exists && n.LastReport == nil):
		r.Verdict, r.Message = Unknown, fmt.Sprintf("node: %s is neither a Kubernetes Node nor reported by an agent", node)
	case n.LastReport == nil:
		r.Verdict, r.Message = Unknown, fmt.Sprintf("node: %s has no report from its cozy-health agent (%s)", node, report.ReasonNoData)
	case !s.fresh(node, now):
		r.Verdict = Unknown
		r.Message = fmt.Sprintf("node: %s: no valid report since %s (%s)", node, n.LastHeard.UTC().Format(time.RFC3339), report.ReasonHeartbeatMissed)
		r.Attributes = map[string]float64{"secondsSinceReport": now.Sub(n.LastHeard).Seconds()}
	default:
		r.Verdict = Safe
		r.Message = fmt.Sprintf("node: %s reported %s ago", node, now.Sub(n.LastHeard).Round(time.Millisecond))
		if !n.Exists {
			r.Message += "; it is no longer a Kubernetes Node"
		} else if n.Cordoned {
			r.Message += "; it is already cordoned"
		}
	}
	return []Reason{r}
}

// etcdQuorumRule: draining a voting member must keep etcd's quorum
// (quorum.Count.Judge, through raftReason).
type etcdQuorumRule struct{}

func (etcdQuorumRule) Name() string { return RuleEtcdQuorum }

func (etcdQuorumRule) Judge(node string, s *Snapshot, now time.Time) []Reason {
	v := s.view(quorum.Etcd, now)
	r := raftReason(RuleEtcdQuorum, report.ComponentEtcd, "etcd", nil, &v, node, s, now)
	if v.NoSpaceAgreed() {
		// NOSPACE is cluster-wide: draining one node neither causes nor
		// clears it, and raising the quota needs each member restarted, so
		// it never blocks a drain that keeps quorum.
		r.Message += "; etcd has a NOSPACE alarm (cluster-wide, refusing writes): draining this node does not change it"
	}
	return []Reason{r}
}

// ovnCentralQuorumRule: draining a node that hosts an ovn-central member
// must keep the quorum (quorum.Count.Judge) of each clustered database
// (NB and SB).
// Absence of data is never read as safe: while kube-ovn is deployed (some
// node observes it), a database no node reports a member of, or a target
// whose ovn-central-member check reads Unknown, is unknown. Members are
// believed only from control-plane nodes (quorum.Read); a control-plane
// target that reports no member is safe only while every voting member is
// accounted for on other nodes.
type ovnCentralQuorumRule struct{}

func (ovnCentralQuorumRule) Name() string { return RuleOVNCentralQuorum }

func (ovnCentralQuorumRule) Judge(node string, s *Snapshot, now time.Time) []Reason {
	reason := func(v Verdict, format string, args ...any) []Reason {
		return []Reason{{Rule: RuleOVNCentralQuorum, Component: report.ComponentKubeOVN, Verdict: v, Message: fmt.Sprintf(format, args...)}}
	}
	views := make([]quorum.View, len(quorum.OVNDatabases))
	members := 0
	for i, db := range quorum.OVNDatabases {
		views[i] = s.view(db, now)
		members += len(views[i].Members)
	}
	n := s.nodes[node]
	switch {
	case n.LastReport == nil:
		return reason(Unknown, "kube-ovn: whether %s hosts an ovn-central member is unknown: its agent never reported", node)
	case len(s.kubeOVN) == 0 && members == 0:
		return reason(Safe, "kube-ovn: no node observes kube-ovn (no ovs-ovn, no ovn-central member), %s included", node)
	case s.facts[node] != nil && s.facts[node].claims.OVNUnknown:
		return reason(Unknown, "kube-ovn: whether %s hosts an ovn-central member is unknown: its ovn-central-member check reads Unknown", node)
	}
	var out []Reason
	for i, db := range quorum.OVNDatabases {
		v := &views[i]
		ref := &report.ResourceRef{Kind: report.KindOVNDatabase, Name: db}
		if len(v.Members) == 0 {
			out = append(out, Reason{Rule: RuleOVNCentralQuorum, Component: report.ComponentKubeOVN, Verdict: Unknown, ResourceRef: ref,
				Message: fmt.Sprintf("kube-ovn: kube-ovn runs (observed on %d node(s)) but no control-plane node reports an ovn-central %s member: whether draining %s keeps its quorum is unknown",
					len(s.kubeOVN), db, node)})
			continue
		}
		if _, ok := v.Member(node); ok || n.Role != state.RoleWorker {
			out = append(out, raftReason(RuleOVNCentralQuorum, report.ComponentKubeOVN, "kube-ovn ovn-central "+db, ref, v, node, s, now))
		}
	}
	if len(out) == 0 {
		return reason(Safe, "kube-ovn: %s hosts no ovn-central member: it is not a control-plane node (no %s label), and members are believed only there", node, state.LabelControlPlane)
	}
	return out
}

// replicaCount is a DRBD resource after the target's replica is removed.
type replicaCount struct {
	target replica
	// replicas is the resource's replica count (diskful and diskless).
	replicas int
	// upToDate / upToDateMaybe: other diskful replicas certainly / possibly
	// UpToDate on nodes that stay.
	upToDate, upToDateMaybe int
	// reachable / reachableMaybe: other replicas certainly / possibly
	// connected (not Down) on nodes that stay.
	reachable, reachableMaybe int
	// targetUnderstated: the target says its replica is not UpToDate, but
	// the other holders' view of LINSTOR counts more UpToDate replicas than
	// they and the unreported replicas can hold: the target may hold one.
	targetUnderstated bool
	// others describes every other replica that does not certainly count.
	others []string
	// rejected are the replica claims no other holder's view corroborates.
	rejected []quorum.Rejection
}

// KindDRBDReplica is the kind of a rejected DRBD replica claim.
const KindDRBDReplica = "drbd-replica"

// corroborated tells whether LINSTOR's view as some holder other than r
// reports it has room for r's claim: at least as many replicas as nodes
// claim one, and, when r claims an UpToDate diskful replica, at least as
// many UpToDate replicas as nodes claim. Each agent reports its own
// replicas with the cluster-wide counts of the LINSTOR controller's view,
// so a node's claim about itself is believed only where another node's
// report of the controller's view agrees; a node that invents a replica
// finds no such witness among the honest holders.
func corroborated(r replica, reps []replica, claimedUp int) bool {
	for _, m := range reps {
		if m.node == r.node || m.replicas < len(reps) {
			continue
		}
		if r.upToDate && !r.diskless && m.upToDateReplicas < claimedUp {
			continue
		}
		return true
	}
	return false
}

// countReplicas counts resource res's replicas other than node's at now.
// Replicas LINSTOR counts but no reporting node holds are uncertain, and
// so is a replica claim no other holder's view of LINSTOR corroborates.
func countReplicas(res, node string, s *Snapshot, now time.Time) replicaCount {
	reps, lives := s.replicasAt(res, now)
	c := replicaCount{replicas: len(reps)}
	ltdUpToDate := -1
	claimedUp, othersUp, viewUp := 0, 0, -1
	for _, r := range reps {
		if r.upToDate && !r.diskless {
			claimedUp++
			if r.node != node {
				othersUp++
			}
		}
		if r.node != node && r.upToDateReplicas > viewUp {
			viewUp = r.upToDateReplicas
		}
	}
	for i := range reps {
		r := &reps[i]
		if r.replicas > c.replicas {
			c.replicas = r.replicas
		}
		if r.upToDateReplicas > ltdUpToDate {
			ltdUpToDate = r.upToDateReplicas
		}
		if r.node == node {
			c.target = *r
			continue
		}
		var lv liveness
		var why string
		if lives != nil {
			lv, why = lives[i].lv, lives[i].why
		} else {
			lv, why = s.liveness(r.node, now)
		}
		switch {
		case lv == gone:
			c.others = append(c.others, r.node+" "+why)
		case lv == uncertain:
			c.reachableMaybe++
			if r.upToDate && !r.diskless {
				c.upToDateMaybe++
			}
			c.others = append(c.others, r.node+" "+why)
		case r.status == report.StatusUnknown:
			c.reachableMaybe++
			if !r.diskless {
				c.upToDateMaybe++
			}
			c.others = append(c.others, r.node+" Unknown")
		case !corroborated(*r, reps, claimedUp):
			c.reachableMaybe++
			if r.upToDate && !r.diskless {
				c.upToDateMaybe++
			}
			c.others = append(c.others, r.node+" (no other holder's view of LINSTOR corroborates its claim)")
			c.rejected = append(c.rejected, quorum.Rejection{Node: r.node, Kind: KindDRBDReplica, Reason: "not_corroborated"})
		default:
			down := r.status == report.StatusDown
			if !down {
				c.reachable++
			}
			switch {
			case r.upToDate && !r.diskless && !down:
				c.upToDate++
			case !r.diskless || down:
				c.others = append(c.others, fmt.Sprintf("%s %s", r.node, r.status))
			}
		}
	}
	missing := max(c.replicas-len(reps), 0)
	if missing > 0 {
		c.reachableMaybe += missing
		seen := 0
		for _, r := range reps {
			if r.upToDate && !r.diskless {
				seen++
			}
		}
		if extra := ltdUpToDate - seen; extra > 0 {
			c.upToDateMaybe += min(extra, missing)
		}
		c.others = append(c.others, fmt.Sprintf("%d replica(s) on no reporting node", missing))
	}
	if !(c.target.upToDate && !c.target.diskless) && viewUp > othersUp+missing {
		c.targetUnderstated = true
	}
	return c
}

func (c replicaCount) with() string {
	if len(c.others) == 0 {
		return ""
	}
	return " (" + strings.Join(c.others, ", ") + ")"
}

// linstorLastReplicaRule: the node must not hold the only UpToDate replica
// of a resource among the nodes that stay.
type linstorLastReplicaRule struct{}

func (linstorLastReplicaRule) Name() string { return RuleLinstorLastReplica }

func (linstorLastReplicaRule) Judge(node string, s *Snapshot, now time.Time) []Reason {
	if s.ctl != nil {
		return ctlLastReplica(node, s, now)
	}
	var out []Reason
	var rejected []quorum.Rejection
	resources := s.resources(node)
	targetFresh := s.fresh(node, now)
	for _, d := range resources {
		res := d.resource
		c := countReplicas(res, node, s, now)
		rejected = append(rejected, c.rejected...)
		if c.upToDate > 0 || (c.target.diskless && !c.targetUnderstated) {
			continue
		}
		ref := &report.ResourceRef{Kind: report.KindResource, Name: res}
		attrs := map[string]float64{AttrReplicas: float64(c.replicas), AttrUpToDateAfter: 0, AttrUncertainReplicas: float64(c.upToDateMaybe)}
		targetUpToDate := c.target.upToDate && c.target.status != report.StatusUnknown && targetFresh
		targetMaybe := !targetFresh || c.target.status == report.StatusUnknown
		switch {
		case c.targetUnderstated:
			out = append(out, Reason{Rule: RuleLinstorLastReplica, Component: report.ComponentLinstor, Verdict: Unknown, ResourceRef: ref, Attributes: attrs,
				Message:  fmt.Sprintf("linstor: %s says its replica of %s is not UpToDate, but LINSTOR's view as the other holders report it counts more UpToDate replicas than they hold: %s may hold the only one%s", node, res, node, c.with()),
				rejected: []quorum.Rejection{{Node: node, Kind: KindDRBDReplica, Reason: "contradicts_controller_view"}}})
		case targetUpToDate && c.upToDateMaybe == 0:
			out = append(out, Reason{Rule: RuleLinstorLastReplica, Component: report.ComponentLinstor, Verdict: Blocked, ResourceRef: ref, Attributes: attrs,
				Message: fmt.Sprintf("linstor: %s holds the only UpToDate replica of %s among the nodes that stay; %d replica(s) in all%s", node, res, c.replicas, c.with())})
		case (targetUpToDate || targetMaybe) && c.upToDateMaybe > 0:
			out = append(out, Reason{Rule: RuleLinstorLastReplica, Component: report.ComponentLinstor, Verdict: Unknown, ResourceRef: ref, Attributes: attrs,
				Message: fmt.Sprintf("linstor: %s may hold the only UpToDate replica of %s: no other replica is certainly UpToDate, %d uncertain%s", node, res, c.upToDateMaybe, c.with())})
		case targetMaybe:
			out = append(out, Reason{Rule: RuleLinstorLastReplica, Component: report.ComponentLinstor, Verdict: Unknown, ResourceRef: ref, Attributes: attrs,
				Message: fmt.Sprintf("linstor: the state of %s's replica of %s is unknown and no other replica is UpToDate%s", node, res, c.with())})
		}
	}
	if len(out) == 0 {
		msg := fmt.Sprintf("linstor: %s holds no DRBD resource", node)
		if len(resources) > 0 {
			msg = fmt.Sprintf("linstor: each of the %d DRBD resources on %s keeps an UpToDate replica elsewhere", len(resources), node)
		}
		if why := drbdUnknownWhy(node, s); why != "" {
			return []Reason{{Rule: RuleLinstorLastReplica, Component: report.ComponentLinstor, Verdict: Unknown,
				Message: fmt.Sprintf("linstor: which DRBD resources %s holds is unknown: %s", node, why)}}
		}
		out = append(out, Reason{Rule: RuleLinstorLastReplica, Component: report.ComponentLinstor, Verdict: Safe, Message: msg,
			Attributes: map[string]float64{"resources": float64(len(resources))}})
	}
	out[0].rejected = append(out[0].rejected, rejected...)
	return out
}

// drbdUnknownWhy says why the DRBD resources node holds are not known (its
// agent never reported, or its drbd-resource check read Unknown as a
// whole); empty when its report lists them. Holding none is then never
// read from the absence of data.
func drbdUnknownWhy(node string, s *Snapshot) string {
	if s.ctl != nil {
		if s.ctl.why != "" {
			return "the LINSTOR controller's view is not current (" + s.ctl.why + ")"
		}
		return ""
	}
	if s.nodes[node].LastReport == nil {
		return "its agent never reported"
	}
	if r := s.drbdUnknown(node); r != "" {
		return fmt.Sprintf("its drbd-resource check reads Unknown (%s)", r)
	}
	return ""
}

// linstorQuorumRule: draining the node must leave every resource it holds
// a majority of its replicas (diskful and diskless) connected.
type linstorQuorumRule struct{}

func (linstorQuorumRule) Name() string { return RuleLinstorQuorum }

func (linstorQuorumRule) Judge(node string, s *Snapshot, now time.Time) []Reason {
	if s.ctl != nil {
		return ctlQuorum(node, s, now)
	}
	var out []Reason
	var rejected []quorum.Rejection
	resources := s.resources(node)
	for _, d := range resources {
		res := d.resource
		c := countReplicas(res, node, s, now)
		rejected = append(rejected, c.rejected...)
		need := quorum.Needed(c.replicas)
		if c.reachable >= need {
			continue
		}
		v := Blocked
		if c.reachable+c.reachableMaybe >= need {
			v = Unknown
		}
		attrs := map[string]float64{AttrReplicas: float64(c.replicas), AttrQuorum: float64(need),
			AttrReachableAfter: float64(c.reachable), AttrUncertainReplicas: float64(c.reachableMaybe)}
		msg := fmt.Sprintf("linstor: draining %s leaves %s with %d of %d replicas connected, quorum needs %d%s", node, res, c.reachable, c.replicas, need, c.with())
		if v == Unknown {
			msg = fmt.Sprintf("linstor: draining %s leaves %s with %d of %d replicas certainly connected (%d if the %d uncertain are), quorum needs %d%s",
				node, res, c.reachable, c.replicas, c.reachable+c.reachableMaybe, c.reachableMaybe, need, c.with())
		}
		out = append(out, Reason{Rule: RuleLinstorQuorum, Component: report.ComponentLinstor, Verdict: v, Message: msg,
			ResourceRef: &report.ResourceRef{Kind: report.KindResource, Name: res}, Attributes: attrs})
	}
	if len(out) == 0 {
		if why := drbdUnknownWhy(node, s); why != "" {
			return []Reason{{Rule: RuleLinstorQuorum, Component: report.ComponentLinstor, Verdict: Unknown,
				Message: fmt.Sprintf("linstor: which DRBD resources %s holds is unknown: %s", node, why)}}
		}
		msg := fmt.Sprintf("linstor: %s holds no DRBD resource", node)
		if len(resources) > 0 {
			msg = fmt.Sprintf("linstor: each of the %d DRBD resources on %s keeps a quorum of replicas without it", len(resources), node)
		}
		out = append(out, Reason{Rule: RuleLinstorQuorum, Component: report.ComponentLinstor, Verdict: Safe, Message: msg,
			Attributes: map[string]float64{"resources": float64(len(resources))}})
	}
	out[0].rejected = append(out[0].rejected, rejected...)
	return out
}

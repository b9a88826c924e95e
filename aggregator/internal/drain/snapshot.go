package drain

import (
	"fmt"
	"sort"
	"time"

	"github.com/cozystack/cozy-health/aggregator/internal/quorum"
	"github.com/cozystack/cozy-health/aggregator/internal/state"
	"github.com/cozystack/cozy-health/pkg/linstorapi"
	"github.com/cozystack/cozy-health/pkg/report"
)

// NodeInfo is what the drain rules know about one node: its Kubernetes Node
// object and its agent's latest accepted report.
type NodeInfo struct {
	// Exists tells whether a Kubernetes Node of this name exists.
	Exists bool
	// Cordoned is the Node's spec.unschedulable.
	Cordoned bool
	// LastReport is the latest accepted report; nil when the agent never
	// reported. Never mutated.
	LastReport *report.NodeReport
	// LastHeard is when LastReport was accepted.
	LastHeard time.Time
	// Fresh tells whether the agent reported within its heartbeat grace when
	// the snapshot was taken.
	Fresh bool
	// FreshUntil, when set, is when the heartbeat grace runs out: a node
	// Fresh at TakenAt is stale at any now after FreshUntil, so a cached
	// snapshot never reads a silent node as fresh.
	FreshUntil time.Time
	// Role is the node's role by its Node object's labels
	// (state.RoleOf); raft member claims are believed only from
	// control-plane nodes (quorum.Read).
	Role state.Role
}

// KubeNode is what the drain check reads of a Kubernetes Node.
type KubeNode struct {
	// Cordoned is spec.unschedulable.
	Cordoned bool
	// Role is state.RoleOf the Node's labels.
	Role state.Role
}

// liveness is how a node counts for a projection at some now.
type liveness int

const (
	// live: a Kubernetes Node, not cordoned, agent fresh.
	live liveness = iota
	// gone: not a Kubernetes Node any more, or cordoned: certainly not
	// serving after the drain.
	gone
	// uncertain: the agent missed its heartbeat or never reported.
	uncertain
)

// Snapshot is the state the drain rules read: every node's NodeInfo plus
// indexes built when the snapshot is taken, so that one evaluation reads
// only the target's own resources, their few replicas and the few raft
// members. A Snapshot is immutable and safe for concurrent readers.
type Snapshot struct {
	// TakenAt is when the snapshot was taken.
	TakenAt time.Time

	nodes map[string]NodeInfo
	// facts are the drain-relevant facts of every node's LastReport.
	facts map[string]*nodeFacts
	// holders maps a DRBD resource to the nodes holding a replica, sorted.
	// Shared between snapshots while no replica moves; never mutated.
	holders map[string][]string
	// raft lists the nodes the raft reader reads (quorum.Read), sorted:
	// those whose report claims anything about a raft cluster, and every
	// control-plane node.
	raft []string
	// kubeOVN lists the nodes whose latest report observes kube-ovn at
	// all (ovs-ovn, the pinger, ovn-central), sorted: kube-ovn is deployed.
	kubeOVN []string
	// ctl is the LINSTOR controller's view when the aggregator reads it;
	// nil: the agents' drbd-resource reports are read.
	ctl *controllerView
	// memo is set on the copy one evaluation of every node reads
	// (forEvaluation); nil otherwise.
	memo *evalMemo
}

// evalMemo is what every node's verdict at one now shares (EvaluateAll):
// each raft cluster's View and each DRBD resource's replicas, read once
// instead of once per node that reads them (per node, 5,000 times a budget
// at 5,000 nodes).
type evalMemo struct {
	now   time.Time
	views map[string]quorum.View
	// byRes is every resource's replicas from the agents' reports; nil
	// when the controller's view is read (it is indexed already).
	byRes map[string]resMemo
	// live is every node's liveness and freshness at now.
	live map[string]nodeLive
}

// resMemo is one resource's replicas and their holders' liveness, in the
// same order.
type resMemo struct {
	reps []replica
	live []nodeLive
}

// nodeLive is one node's liveness at an evaluation's now.
type nodeLive struct {
	lv    liveness
	why   string
	fresh bool
}

// forEvaluation returns a copy of s for evaluating many nodes at now: its
// raft views and replicas are read once, here. s itself is unchanged (its
// readers may be concurrent).
func (s *Snapshot) forEvaluation(now time.Time) *Snapshot {
	c := *s
	m := &evalMemo{now: now, views: make(map[string]quorum.View, 1+len(quorum.OVNDatabases))}
	m.views[quorum.Etcd] = s.view(quorum.Etcd, now)
	for _, db := range quorum.OVNDatabases {
		m.views[db] = s.view(db, now)
	}
	m.live = make(map[string]nodeLive, len(s.nodes))
	for name := range s.nodes {
		lv, why := s.liveness(name, now)
		m.live[name] = nodeLive{lv: lv, why: why, fresh: s.fresh(name, now)}
	}
	if s.ctl == nil {
		// Every holder's facts in name order: each resource's replicas
		// come out in its holders' order (sorted), as replicas reads them.
		names := make([]string, 0, len(s.facts))
		for name, f := range s.facts {
			if len(f.drbd) > 0 {
				names = append(names, name)
			}
		}
		sort.Strings(names)
		// One backing array each, carved per resource by its holders.
		total := 0
		for _, h := range s.holders {
			total += len(h)
		}
		reps, lives := make([]replica, 0, total), make([]nodeLive, 0, total)
		at := make(map[string]*resMemo, len(s.holders))
		m.byRes = make(map[string]resMemo, len(s.holders))
		for res, h := range s.holders {
			n := len(reps)
			at[res] = &resMemo{reps: reps[n : n : n+len(h)], live: lives[n : n : n+len(h)]}
			reps, lives = reps[:n+len(h)], lives[:n+len(h)]
		}
		for _, name := range names {
			l := m.live[name]
			drbd := s.facts[name].drbd
			for i, d := range drbd {
				// A node listing one resource twice is its holder twice
				// (buildHolders), each time with its first listing, as
				// replicas finds it (sort.Search).
				first := d
				for j := i; j > 0 && drbd[j-1].resource == d.resource; j-- {
					first = drbd[j-1]
				}
				if r := at[d.resource]; r != nil && len(r.reps) < cap(r.reps) {
					r.reps = append(r.reps, first.rep)
					r.live = append(r.live, l)
				}
			}
		}
		for res, r := range at {
			m.byRes[res] = *r
		}
	}
	c.memo = m
	return &c
}

// WithControllerView returns s reading the LINSTOR replicas from the
// controller's view (reps, or why it is not current) instead of the
// agents' reports, without its satellites and storage pools
// (WithPlacement has them).
func (s *Snapshot) WithControllerView(reps []linstorapi.Replica, why string) *Snapshot {
	return s.WithPlacement(linstorapi.Placement{Replicas: reps, PoolsWhy: "the storage pools are not in the drain's view of LINSTOR"}, why)
}

// WithPlacement returns s reading the LINSTOR replicas, satellites and
// storage pools from the controller's view (p, or why it is not current)
// instead of the agents' reports.
func (s *Snapshot) WithPlacement(p linstorapi.Placement, why string) *Snapshot {
	c := *s
	c.ctl = newControllerView(p, why)
	return &c
}

// replica is one node's replica of a DRBD resource.
type replica struct {
	node     string
	upToDate bool
	diskless bool
	status   report.Status
	// replicas and upToDateReplicas are the cluster-wide counts this
	// node's observation carries (-1 when absent).
	replicas         int
	upToDateReplicas int
	// lin is the replica as the controller's view has it; nil when read
	// from an agent's report.
	lin *linstorapi.Replica
}

// drbdFact is one node's replica of one resource.
type drbdFact struct {
	resource string
	rep      replica
}

// nodeFacts are what the rules read of one report, extracted once per
// report (reports are immutable, so facts are cached by report pointer).
type nodeFacts struct {
	report *report.NodeReport
	// claims are the report's raft claims, read by the one reader
	// (quorum.ClaimsOf); claims.KubeOVN: the report observes kube-ovn;
	// claims.OVNUnknown: its ovn-central-member check read Unknown as a
	// whole, so whether the node hosts a member is not known.
	claims *quorum.Claims
	// raft: the report claims something about a raft cluster.
	raft bool
	// drbdUnknown is the reason of a drbd-resource check that read Unknown
	// as a whole (LINSTOR unreachable, no DRBD source): which resources
	// the node holds is not known. Empty when it did not.
	drbdUnknown string
	// drbd is sorted by resource.
	drbd []drbdFact
}

func extract(node string, r *report.NodeReport) *nodeFacts {
	f := &nodeFacts{report: r, claims: quorum.ClaimsOf(r)}
	for i := range r.Observations {
		o := &r.Observations[i]
		if o.Component == report.ComponentEtcd || o.Check == report.CheckOVNCentralMember {
			f.raft = true
		}
		switch {
		case o.Check == report.CheckDRBDResource && o.Status == report.StatusUnknown && (o.ResourceRef == nil || o.ResourceRef.Kind != report.KindResource):
			f.drbdUnknown = o.Reason
		case o.Check == report.CheckDRBDResource && o.ResourceRef != nil && o.ResourceRef.Kind == report.KindResource && o.ResourceRef.Name != "":
			rp := replica{node: node, status: o.Status, replicas: -1, upToDateReplicas: -1}
			for k, v := range o.Attributes {
				switch k {
				case report.AttrUpToDate:
					rp.upToDate = v == 1
				case report.AttrDiskless:
					rp.diskless = v == 1
				case report.AttrReplicas:
					rp.replicas = int(v)
				case report.AttrUpToDateReplicas:
					rp.upToDateReplicas = int(v)
				}
			}
			f.drbd = append(f.drbd, drbdFact{resource: o.ResourceRef.Name, rep: rp})
		}
	}
	sort.Slice(f.drbd, func(i, j int) bool { return f.drbd[i].resource < f.drbd[j].resource })
	return f
}

// sameResources tells whether a and b hold replicas of the same resources.
func sameResources(a, b *nodeFacts) bool {
	var la, lb int
	if a != nil {
		la = len(a.drbd)
	}
	if b != nil {
		lb = len(b.drbd)
	}
	if la != lb {
		return false
	}
	for i := 0; i < la; i++ {
		if a.drbd[i].resource != b.drbd[i].resource {
			return false
		}
	}
	return true
}

// Indexer takes snapshots incrementally: a report seen in the previous
// snapshot is not read again, and the resource placement index is rebuilt
// only when some node's set of resources changed. Not safe for concurrent
// use; drainserver.Service serializes it.
type Indexer struct {
	facts   map[string]*nodeFacts
	holders map[string][]string
}

// NewSnapshot takes a snapshot of nodes at takenAt with a fresh Indexer.
// nodes is not retained; the reports it points to are.
func NewSnapshot(nodes map[string]NodeInfo, takenAt time.Time) *Snapshot {
	var x Indexer
	return x.Snapshot(nodes, takenAt)
}

// Snapshot takes a snapshot of nodes at takenAt, reusing what it extracted
// from unchanged reports in its previous snapshot.
func (x *Indexer) Snapshot(nodes map[string]NodeInfo, takenAt time.Time) *Snapshot {
	s := &Snapshot{
		TakenAt: takenAt,
		nodes:   make(map[string]NodeInfo, len(nodes)),
		facts:   make(map[string]*nodeFacts, len(nodes)),
	}
	moved := x.holders == nil
	for name, n := range nodes {
		s.nodes[name] = n
		if n.LastReport == nil {
			if prev := x.facts[name]; prev != nil && len(prev.drbd) > 0 {
				moved = true
			}
			continue
		}
		prev := x.facts[name]
		f := prev
		if prev == nil || prev.report != n.LastReport {
			f = extract(name, n.LastReport)
			if !sameResources(prev, f) {
				moved = true
			}
		}
		s.facts[name] = f
	}
	for name, prev := range x.facts {
		if _, ok := s.facts[name]; !ok && len(prev.drbd) > 0 {
			moved = true
		}
	}
	if moved {
		x.holders = buildHolders(s.facts)
	}
	x.facts = s.facts
	s.holders = x.holders

	for name, f := range s.facts {
		if f.raft || s.nodes[name].Role == state.RoleControlPlane {
			s.raft = append(s.raft, name)
		}
		if f.claims.KubeOVN {
			s.kubeOVN = append(s.kubeOVN, name)
		}
	}
	for name, n := range s.nodes {
		if _, ok := s.facts[name]; !ok && n.Role == state.RoleControlPlane {
			s.raft = append(s.raft, name)
		}
	}
	sort.Strings(s.raft)
	sort.Strings(s.kubeOVN)
	return s
}

// view is the raft reader's View of cluster at now (quorum.Read over the
// nodes of s.raft, each as fresh as it is at now).
func (s *Snapshot) view(cluster string, now time.Time) quorum.View {
	if m := s.memo; m != nil && now.Equal(m.now) {
		if v, ok := m.views[cluster]; ok {
			return v
		}
	}
	nodes := make([]quorum.Node, 0, len(s.raft))
	for _, name := range s.raft {
		n := s.nodes[name]
		qn := quorum.Node{Name: name, Role: n.Role, Reported: n.LastReport != nil, Fresh: s.fresh(name, now)}
		if f := s.facts[name]; f != nil {
			qn.Claims = f.claims
		}
		nodes = append(nodes, qn)
	}
	return quorum.Read(cluster, nodes)
}

func buildHolders(facts map[string]*nodeFacts) map[string][]string {
	total := 0
	for _, f := range facts {
		total += len(f.drbd)
	}
	h := make(map[string][]string, total/2)
	for name, f := range facts {
		for _, d := range f.drbd {
			h[d.resource] = append(h[d.resource], name)
		}
	}
	for _, nodes := range h {
		sort.Strings(nodes)
	}
	return h
}

// drbdUnknown is the reason node's drbd-resource check read Unknown as a
// whole; empty when it did not (or the node never reported).
func (s *Snapshot) drbdUnknown(node string) string {
	if s.ctl != nil {
		return ""
	}
	if f := s.facts[node]; f != nil {
		return f.drbdUnknown
	}
	return ""
}

// resources returns the resources node holds a replica of, sorted.
func (s *Snapshot) resources(node string) []drbdFact {
	if s.ctl != nil {
		return s.ctl.byNode[node]
	}
	if f := s.facts[node]; f != nil {
		return f.drbd
	}
	return nil
}

// replicas returns every replica of resource res, by node.
func (s *Snapshot) replicas(res string) []replica {
	if s.ctl != nil {
		return s.ctl.byRes[res]
	}
	if m := s.memo; m != nil && m.byRes != nil {
		return m.byRes[res].reps
	}
	holders := s.holders[res]
	out := make([]replica, 0, len(holders))
	for _, n := range holders {
		f := s.facts[n]
		if f == nil {
			continue
		}
		i := sort.Search(len(f.drbd), func(i int) bool { return f.drbd[i].resource >= res })
		if i < len(f.drbd) && f.drbd[i].resource == res {
			out = append(out, f.drbd[i].rep)
		}
	}
	return out
}

// replicasAt returns every replica of resource res, by node, and when
// the evaluation's memo has them (forEvaluation) their holders' liveness
// at now, in the same order; nil liveness: ask liveness.
func (s *Snapshot) replicasAt(res string, now time.Time) ([]replica, []nodeLive) {
	if m := s.memo; m != nil && m.byRes != nil && now.Equal(m.now) {
		r := m.byRes[res]
		return r.reps, r.live
	}
	return s.replicas(res), nil
}

// Known tells whether node is a Kubernetes Node or has an agent report.
func (s *Snapshot) Known(node string) bool {
	n, ok := s.nodes[node]
	return ok && (n.Exists || n.LastReport != nil)
}

// Len is the number of nodes in the snapshot.
func (s *Snapshot) Len() int { return len(s.nodes) }

// fresh tells whether node's agent is within its heartbeat grace at now.
func (s *Snapshot) fresh(node string, now time.Time) bool {
	if m := s.memo; m != nil && now.Equal(m.now) {
		if l, ok := m.live[node]; ok {
			return l.fresh
		}
	}
	n, ok := s.nodes[node]
	if !ok || n.LastReport == nil || !n.Fresh {
		return false
	}
	return n.FreshUntil.IsZero() || !now.After(n.FreshUntil)
}

// liveness classifies node at now for the projections, with a short
// explanation when it is not live.
func (s *Snapshot) liveness(node string, now time.Time) (liveness, string) {
	if m := s.memo; m != nil && now.Equal(m.now) {
		if l, ok := m.live[node]; ok {
			return l.lv, l.why
		}
	}
	n, ok := s.nodes[node]
	switch {
	case !ok || !n.Exists:
		return gone, "not a Kubernetes Node"
	case n.Cordoned:
		return gone, "cordoned"
	case n.LastReport == nil:
		return uncertain, "no agent report"
	case !s.fresh(node, now):
		return uncertain, fmt.Sprintf("stale: no report since %s", n.LastHeard.UTC().Format(time.RFC3339))
	}
	return live, ""
}

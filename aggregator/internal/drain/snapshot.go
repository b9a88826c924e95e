package drain

import (
	"fmt"
	"sort"
	"time"

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
// indexes built once, when the snapshot is taken, so that one evaluation
// reads only the target's own resources and the few raft members. A
// Snapshot is immutable and safe for concurrent readers.
type Snapshot struct {
	// TakenAt is when the snapshot was taken.
	TakenAt time.Time

	nodes map[string]NodeInfo
	// etcd is the etcd cluster's members and reported sizes.
	etcd raftIndex
	// ovn is one raft index per ovn-central database.
	ovn map[string]*raftIndex
	// drbd maps a resource name to its replicas, sorted by node.
	drbd map[string][]replica
	// drbdByNode maps a node to the resources it holds, sorted.
	drbdByNode map[string][]string
}

// raftMember is one node's member of a raft cluster as its latest report
// describes it.
type raftMember struct {
	node    string
	learner bool
	status  report.Status
	reason  string
}

// raftSize is a cluster size one node reported.
type raftSize struct {
	node string
	size int
}

// raftIndex is one raft cluster: its members, and the sizes reported.
type raftIndex struct {
	members []raftMember
	sizes   []raftSize
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
}

// NewSnapshot takes a snapshot of nodes at takenAt and builds its indexes.
// nodes is not retained; the reports it points to are.
func NewSnapshot(nodes map[string]NodeInfo, takenAt time.Time) *Snapshot {
	s := &Snapshot{
		TakenAt:    takenAt,
		nodes:      make(map[string]NodeInfo, len(nodes)),
		ovn:        map[string]*raftIndex{},
		drbd:       map[string][]replica{},
		drbdByNode: map[string][]string{},
	}
	names := make([]string, 0, len(nodes))
	for name, n := range nodes {
		s.nodes[name] = n
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		n := nodes[name]
		if n.LastReport == nil {
			continue
		}
		for i := range n.LastReport.Observations {
			s.index(name, &n.LastReport.Observations[i])
		}
	}
	return s
}

func (s *Snapshot) index(node string, o *report.Observation) {
	switch {
	case o.Component == report.ComponentEtcd && o.Check == report.CheckEtcdMember:
		s.etcd.members = append(s.etcd.members, raftMember{node: node, learner: o.Attributes[report.AttrIsLearner] == 1, status: o.Status, reason: o.Reason})
	case o.Component == report.ComponentEtcd && o.Check == report.CheckEtcdMembership:
		if v, ok := o.Attributes[report.AttrVotingMembers]; ok {
			s.etcd.sizes = append(s.etcd.sizes, raftSize{node: node, size: int(v)})
		}
	case o.Check == report.CheckOVNCentralMember && o.ResourceRef != nil && o.ResourceRef.Name != "":
		db := s.ovn[o.ResourceRef.Name]
		if db == nil {
			db = &raftIndex{}
			s.ovn[o.ResourceRef.Name] = db
		}
		db.members = append(db.members, raftMember{node: node, status: o.Status, reason: o.Reason})
		if v, ok := o.Attributes[report.AttrRaftServers]; ok {
			db.sizes = append(db.sizes, raftSize{node: node, size: int(v)})
		}
	case o.Check == report.CheckDRBDResource && o.ResourceRef != nil && o.ResourceRef.Kind == report.KindResource && o.ResourceRef.Name != "":
		name := o.ResourceRef.Name
		r := replica{node: node, status: o.Status, replicas: -1, upToDateReplicas: -1,
			upToDate: o.Attributes[report.AttrUpToDate] == 1, diskless: o.Attributes[report.AttrDiskless] == 1}
		if v, ok := o.Attributes[report.AttrReplicas]; ok {
			r.replicas = int(v)
		}
		if v, ok := o.Attributes[report.AttrUpToDateReplicas]; ok {
			r.upToDateReplicas = int(v)
		}
		s.drbd[name] = append(s.drbd[name], r)
		s.drbdByNode[node] = append(s.drbdByNode[node], name)
	}
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
	n, ok := s.nodes[node]
	if !ok || n.LastReport == nil || !n.Fresh {
		return false
	}
	return n.FreshUntil.IsZero() || !now.After(n.FreshUntil)
}

// liveness classifies node at now for the projections, with a short
// explanation when it is not live.
func (s *Snapshot) liveness(node string, now time.Time) (liveness, string) {
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

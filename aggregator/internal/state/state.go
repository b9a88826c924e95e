// Package state keeps, in every aggregator replica, the latest accepted
// report of every node and when it arrived. It implements ingest.Sink. It
// judges nothing: heartbeats and rollups are the rollup package's, computed
// from a Snapshot.
package state

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cozystack/cozy-health/pkg/report"
)

// Entry is the latest accepted report of one node.
type Entry struct {
	// Report is the report as accepted; never mutated after Accept. Nil for
	// a node Kubernetes lists (Expect) from which this replica has accepted
	// no report: the rollup reads it as a missed heartbeat, never as a
	// node with nothing wrong.
	Report *report.NodeReport
	// ReceivedAt is when the aggregator accepted it (its own clock); for an
	// expected node without a report, when this replica learned of it.
	ReceivedAt time.Time
	// Role is what the node's Kubernetes Node object says the node is, by
	// labels the node cannot set on itself (SetRole); RoleUnknown while no
	// Node object of this name was seen.
	Role Role
	// Via is empty when this replica accepted Report from the node's own
	// agent, and otherwise names the aggregator replica that relayed it
	// (a partial partition: this replica does not hear the node, a peer
	// does). A relayed report was verified again here, with its signature.
	Via string
	// Kube is what Kubernetes says of the node apart from its role: its
	// kubelet's Lease and whether it is in planned maintenance (SetKube).
	Kube KubeFacts
}

// KubeFacts are what Kubernetes publishes about a node that explain its
// agent's silence: whether the kubelet still renews its Lease in
// kube-node-lease, and whether the node is cordoned (every drain, and
// Talos' reboot and upgrade sequences, cordon first). The zero value
// means nothing is known.
type KubeFacts struct {
	// LeaseRenewedAt is the kubelet Lease's spec.renewTime; zero when no
	// Lease of this node was seen.
	LeaseRenewedAt time.Time
	// LeaseDuration is the Lease's spec.leaseDurationSeconds (the kubelet
	// writes 40 s); the kubelet is alive while RenewedAt + Duration is in
	// the future.
	LeaseDuration time.Duration
	// Cordoned: the Node's spec.unschedulable.
	Cordoned bool
	// TalosCordoned: Talos cordoned it (annotation talos.dev/cordoned:
	// "true", set when the machine shuts down, upgrades or resets).
	TalosCordoned bool
	// MaintenanceSince is when this replica first saw the node in
	// maintenance (cordoned); zero when it is not.
	MaintenanceSince time.Time
}

// Role is what a node is by its Kubernetes Node object's labels. Only
// labels that NodeRestriction forbids a kubelet to set on its own Node
// count (node-role.kubernetes.io/*), so a compromised node cannot promote
// itself.
type Role uint8

const (
	// RoleUnknown: no Node object of this name has been seen.
	RoleUnknown Role = iota
	// RoleWorker: the Node object carries no control-plane label.
	RoleWorker
	// RoleControlPlane: the Node object is labelled
	// node-role.kubernetes.io/control-plane.
	RoleControlPlane
)

// LabelControlPlane marks a control-plane Node. NodeRestriction refuses it
// from kubelets (node-role.kubernetes.io/* is not in the kubelet's allowed
// label set), so only a cluster administrator or Talos' control plane
// sets it.
const LabelControlPlane = "node-role.kubernetes.io/control-plane"

// RoleOf is the role of a Node with labels.
func RoleOf(labels map[string]string) Role {
	if _, ok := labels[LabelControlPlane]; ok {
		return RoleControlPlane
	}
	return RoleWorker
}

func (r Role) String() string {
	switch r {
	case RoleWorker:
		return "worker"
	case RoleControlPlane:
		return "control-plane"
	}
	return "unknown"
}

// Observations are the report's observations; none without a report.
func (e Entry) Observations() []report.Observation {
	if e.Report == nil {
		return nil
	}
	return e.Report.Observations
}

// Interval is the report's interval; 0 (the default) without a report.
func (e Entry) Interval() time.Duration {
	if e.Report == nil {
		return 0
	}
	return e.Report.Interval
}

// Snapshot is a point-in-time copy of the state: node name -> entry. The
// reports it points to are immutable, so a Snapshot may be read without
// locks.
type Snapshot map[string]Entry

// Names returns the snapshot's node names, sorted.
func (s Snapshot) Names() []string {
	names := make([]string, 0, len(s))
	for n := range s {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Observer is told about every change of the state, outside the state's
// lock. It must not block.
type Observer interface {
	// Accepted is called after a node's report was stored.
	Accepted(node string, receivedAt time.Time)
	// Removed is called after a node was pruned.
	Removed(node string)
}

// State is the aggregator's in-memory state.
type State struct {
	observer Observer

	// mu guards nodes, roles, deleted and trackers' sets.
	mu    sync.RWMutex
	nodes map[string]Entry
	// trackers each collect the names of the nodes changed since their
	// reader last drained them (ReadChanged).
	trackers []*Tracker
	// roles are the roles SetRole recorded, also for nodes not (yet) in
	// nodes, so a report that arrives after its Node carries its role.
	roles map[string]Role
	// kube are the KubeFacts SetKube recorded, also for nodes not (yet) in
	// nodes, as roles are.
	kube map[string]KubeFacts
	// deleted remembers nodes pruned because Kubernetes deleted them, so a
	// report still in flight does not resurrect them; a node object that is
	// created again clears it (Restore).
	deleted map[string]struct{}
	// gen counts the changes of nodes; bumped under mu's write lock.
	gen atomic.Uint64
}

// New returns an empty State. observer may be nil.
func New(observer Observer) *State {
	return &State{observer: observer, nodes: map[string]Entry{}, roles: map[string]Role{}, kube: map[string]KubeFacts{}, deleted: map[string]struct{}{}}
}

// Accept stores r as the latest report of its node. A report older (by
// sequence within the same agent instance) than the stored one is ignored;
// ingest already rejects replays, this only guards reordering across
// streams.
func (s *State) Accept(r *report.NodeReport, receivedAt time.Time) {
	if r == nil || r.NodeName == "" {
		return
	}
	s.mu.Lock()
	if _, gone := s.deleted[r.NodeName]; gone {
		s.mu.Unlock()
		return
	}
	if prev, ok := s.nodes[r.NodeName]; ok && prev.Report != nil && prev.Report.AgentInstanceID == r.AgentInstanceID && prev.Report.Sequence >= r.Sequence {
		s.mu.Unlock()
		return
	}
	s.nodes[r.NodeName] = Entry{Report: r, ReceivedAt: receivedAt, Role: s.roles[r.NodeName], Kube: s.kube[r.NodeName]}
	s.changed(r.NodeName)
	s.mu.Unlock()
	if s.observer != nil {
		s.observer.Accepted(r.NodeName, receivedAt)
	}
}

// Expect records that Kubernetes lists node and an agent should report
// for it: until one of its reports is accepted, the node is in the state
// without a report (its heartbeat missed since at), so a node whose agent
// never reached this replica reads Unknown instead of being absent. A node
// already in the state, or pruned (DeleteNode) and not restored, is left
// alone.
func (s *State) Expect(name string, at time.Time) {
	s.mu.Lock()
	_, gone := s.deleted[name]
	_, had := s.nodes[name]
	if gone || had {
		s.mu.Unlock()
		return
	}
	s.nodes[name] = Entry{ReceivedAt: at, Role: s.roles[name], Kube: s.kube[name]}
	s.changed(name)
	s.mu.Unlock()
}

// Unexpect undoes Expect for a node that no longer should report (its
// labels left the expected set): it is dropped if no report of it was
// accepted; a node that reports stays.
func (s *State) Unexpect(name string) {
	s.mu.Lock()
	e, ok := s.nodes[name]
	if !ok || e.Report != nil {
		s.mu.Unlock()
		return
	}
	delete(s.nodes, name)
	s.changed(name)
	s.mu.Unlock()
	if s.observer != nil {
		s.observer.Removed(name)
	}
}

// DeleteNode prunes a node that no longer exists in Kubernetes.
func (s *State) DeleteNode(name string) {
	s.mu.Lock()
	_, had := s.nodes[name]
	delete(s.nodes, name)
	delete(s.roles, name)
	delete(s.kube, name)
	s.deleted[name] = struct{}{}
	if had {
		s.changed(name)
	}
	s.mu.Unlock()
	if had && s.observer != nil {
		s.observer.Removed(name)
	}
}

// SetRole records the role of node name from its Node object (RoleOf its
// labels); the node's entry, if any, and every later one carry it.
func (s *State) SetRole(name string, r Role) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.roles[name] == r {
		return
	}
	s.roles[name] = r
	if e, ok := s.nodes[name]; ok {
		e.Role = r
		s.nodes[name] = e
		s.changed(name)
	}
}

// Restore allows reports from a node again after it was deleted (a Node of
// the same name was created).
func (s *State) Restore(name string) {
	s.mu.Lock()
	delete(s.deleted, name)
	s.mu.Unlock()
}

// Snapshot copies the state.
func (s *State) Snapshot() Snapshot {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(Snapshot, len(s.nodes))
	for k, v := range s.nodes {
		out[k] = v
	}
	return out
}

// Read calls f with the state's nodes under its read lock: without a
// copy, for a reader that only looks; f must be quick and must not call
// back into the State.
func (s *State) Read(f func(nodes map[string]Entry)) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	f(s.nodes)
}

// Tracker collects the names of the nodes whose entry changed (stored,
// added, re-roled or removed) since its reader last drained it, so a
// reader that keeps what it derived from every entry revisits only those.
// One goroutine drains a Tracker (ReadChanged).
type Tracker struct {
	names map[string]struct{}
}

// Track returns a Tracker of every change from now on.
func (s *State) Track() *Tracker {
	t := &Tracker{names: map[string]struct{}{}}
	s.mu.Lock()
	s.trackers = append(s.trackers, t)
	s.mu.Unlock()
	return t
}

// changed records name in every tracker and bumps the generation; s.mu
// is held for writing.
func (s *State) changed(name string) {
	s.gen.Add(1)
	for _, t := range s.trackers {
		t.names[name] = struct{}{}
	}
}

// ReadChanged is Read that also hands f the names t collected since the
// last ReadChanged of t (some may no longer be in nodes), and empties t:
// nodes is the state with every one of those changes applied, and any
// later change is in t for the next call. t's owner is the only caller
// with t; writers fill t under the write lock, which excludes this read
// lock.
func (s *State) ReadChanged(t *Tracker, f func(nodes map[string]Entry, changed map[string]struct{})) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	changed := t.names
	t.names = make(map[string]struct{}, len(changed))
	f(s.nodes, changed)
}

// Generation counts every change of the state's nodes (a report stored, a
// node expected, re-roled or removed): it only grows, and it has grown by
// the time the method making the change returns. A reader that records it
// before reading the state (Read, Snapshot) has read at least every change
// counted; one reading the same value later has nothing newer to read.
// Lock-free.
func (s *State) Generation() uint64 { return s.gen.Load() }

// Get returns one node's entry.
func (s *State) Get(node string) (Entry, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e, ok := s.nodes[node]
	return e, ok
}

// Len is the number of nodes in the state.
func (s *State) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.nodes)
}

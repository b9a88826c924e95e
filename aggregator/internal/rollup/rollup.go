// Package rollup turns a state snapshot into the desired status of every
// node-local component. Compute is a pure function of (snapshot, now,
// config), so every replica computes the same answer from the same reports;
// damping (damp.go) and compaction (compact.go) are separate steps.
//
// The rules are the rollup contract of the design page; each is pinned by a
// golden case in testdata/, one scenario a file (regenerate with go test
// -update):
//
//   - Worst wins (Down > Degraded > Unknown > Healthy) within one node's
//     checks and across conditions.
//   - A node silent past its grace is Unknown/HeartbeatMissed in every
//     component; a component no fresh node observes is Unknown/NoData.
//   - Raft clusters (etcd; ovn-central's OVN_Northbound and OVN_Southbound,
//     inside kube-ovn) are read by the quorum package's one reader (which
//     claims are believed) and judged by its one rule, quorum.Count.Judge;
//     judgeRaft (quorum.go) states what each verdict publishes.
//   - A node-local component is Down (AllNodesDown) only when it is Down on
//     every node listed, or a rule of its own (ovn-central's quorum) says it
//     cannot serve; Degraded when some nodes are Down or Degraded; Unknown
//     when the only nodes not Healthy are Unknown.
//   - Per-resource observations fold into one condition per check and node,
//     plus one condition per resource that is not Healthy.
//
// By file: rollup.go Compute and the node projection (the status types are
// the status package's), fold.go one report's observations into conditions
// and node states, quorum.go the raft projections, cache.go the memo that
// lets an unchanged state be retimed instead of recomputed, engine.go the
// loop that drives Compute -> damp -> compact -> stamp and hands the result
// to one status.Publisher.
package rollup

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/cozystack/cozy-health/aggregator/internal/quorum"
	"github.com/cozystack/cozy-health/aggregator/internal/state"
	"github.com/cozystack/cozy-health/aggregator/internal/status"
	"github.com/cozystack/cozy-health/pkg/report"
)

// status.Condition types the rollup adds beyond CamelCase(check).
const (
	// TypeHeartbeat is the per-node heartbeat: Unknown/HeartbeatMissed when
	// the node's agent is silent past its grace.
	TypeHeartbeat = "Heartbeat"
	// TypeQuorum is etcd's quorum projection (component-level).
	TypeQuorum = "Quorum"
	// TypeQuorumMember is one voting member's contribution to quorum.
	TypeQuorumMember = "QuorumMember"
	// TypeData is a component-level condition present when no fresh node
	// observed the component (Unknown/NoData).
	TypeData = "Data"
)

// Reasons the rollup writes.
const (
	ReasonReportReceived  = "ReportReceived"
	ReasonQuorumHealthy   = "AllVotingMembersHealthy"
	ReasonQuorumAtRisk    = "QuorumAtRisk"
	ReasonQuorumLost      = "QuorumLost"
	ReasonNoVotingMembers = "NoVotingMembers"
	ReasonCheckDegraded   = "CheckDegraded"
	// ReasonCheckUnknown: etcd's quorum is healthy but a member's other
	// check (fsync latency, alarms) could not be read.
	ReasonCheckUnknown    = "CheckUnknown"
	ReasonNodesHealthy    = "AllNodesHealthy"
	ReasonNodesNotHealthy = "NodesNotHealthy"
	// ReasonAllNodesDown: a node-local component is Down on every node
	// that reports it, so it is down for the cluster.
	ReasonAllNodesDown = "AllNodesDown"
	// ReasonQuorumUndetermined: whether a quorum of voting members is
	// healthy hinges on members whose health is unknown.
	ReasonQuorumUndetermined = "QuorumUndetermined"
	// Reasons of the summary conditions Compact adds, one per node-level
	// condition type.
	ReasonAllNodesTrue     = "AllNodesTrue"
	ReasonSomeNodesFalse   = "SomeNodesFalse"
	ReasonSomeNodesUnknown = "SomeNodesUnknown"
)

// Config is what the rollup is judged against.
type Config struct {
	// HeartbeatGrace is the silence after which a node is stale; 0 means 3x
	// the interval the node reports, clamped to [MinReportInterval, 2 x
	// DefaultInterval] (DefaultInterval when it reports none): see Grace.
	HeartbeatGrace time.Duration
	// DefaultInterval is the agents' configured interval; it is the unit of
	// FreshForMultiple.
	DefaultInterval time.Duration
	// FreshForMultiple: FreshUntil = ObservedAt + FreshForMultiple x DefaultInterval.
	FreshForMultiple int
	// Replica is this replica's identity (--identity), named by the
	// ReplicaPartitioned condition (partition.go).
	Replica string
	// ManySilentShare and ManySilentMin: silent nodes count as one event
	// (ManyNodesSilent) when at least this share of all nodes, and this
	// many, fell silent within ManySilentWindow; zero means the defaults
	// (DefaultManySilentShare, DefaultManySilentMin, one heartbeat grace).
	ManySilentShare  float64
	ManySilentMin    int
	ManySilentWindow time.Duration
}

// MinReportInterval is the shortest report interval the heartbeat grace
// honours: a node reporting a shorter one is given the grace of this one.
const MinReportInterval = time.Second

// Grace is the heartbeat grace of a node reporting at interval: 3 x
// interval, with the interval the node reports clamped to
// [MinReportInterval, 2 x DefaultInterval] (DefaultInterval when it
// reports none), so the server's configuration, not the agent, bounds how
// long a silent node reads fresh. HeartbeatGrace, when set, is the grace.
func (c Config) Grace(interval time.Duration) time.Duration {
	if c.HeartbeatGrace > 0 {
		return c.HeartbeatGrace
	}
	if interval <= 0 {
		interval = c.DefaultInterval
	}
	if c.DefaultInterval > 0 {
		interval = min(interval, max(2*c.DefaultInterval, MinReportInterval))
	}
	return 3 * max(interval, MinReportInterval)
}

// NextStale is the earliest instant after now at which one of nodes that
// is fresh at now will have missed its heartbeat; the zero time when none
// is fresh.
func (c Config) NextStale(nodes map[string]state.Entry, now time.Time) time.Time {
	var next time.Time
	for _, e := range nodes {
		if c.Stale(e, now) {
			if at := c.nextSilenceChange(e, now); !at.IsZero() && (next.IsZero() || at.Before(next)) {
				next = at
			}
			continue
		}
		at := e.ReceivedAt.Add(c.Grace(e.Interval()) + time.Nanosecond)
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return next
}

// Stale tells whether e's node has missed its heartbeat at now.
// A node without an accepted report (expected from Kubernetes, never
// heard by this replica) is stale from the start: no data is Unknown.
func (c Config) Stale(e state.Entry, now time.Time) bool {
	return e.Report == nil || now.Sub(e.ReceivedAt) > c.Grace(e.Report.Interval)
}

// Compute rolls the snapshot up into every node-local component's status,
// uncompacted (every condition, True ones included) and undamped.
func Compute(snap state.Snapshot, now time.Time, cfg Config) map[string]*status.Component {
	return ComputeCached(snap, now, cfg, nil)
}

// ComputeCached is Compute with a memo of what each report says per
// component (folded conditions and node state), keyed by the report, which
// is immutable: only nodes whose report changed since the last call are
// folded again. The result is identical to Compute's. cache may be nil; a
// Cache must not be shared by concurrent calls.
func ComputeCached(snap state.Snapshot, now time.Time, cfg Config, cache *Cache) map[string]*status.Component {
	names := snap.Names()
	facts := make([]*reportFacts, len(names))
	claims := make([]*quorum.Claims, len(names))
	for i, name := range names {
		facts[i] = cache.get(name, snap[name].Report)
		claims[i] = facts[i].claims
	}
	cache.sweep(snap)
	raft := raftNodes(names, claims, snap, now, cfg)
	silences, manySilent := cfg.explainSilences(names, snap, now)
	var reject rejectFunc
	if cache != nil {
		reject = cache.onReject
	}
	out := make(map[string]*status.Component, len(report.NodeComponents))
	for _, comp := range report.NodeComponents {
		out[comp] = computeComponent(comp, names, facts, raft, silences, reject, snap, now, cfg)
		if comp == report.ComponentNode && manySilent != nil {
			out[comp].Conditions = append(out[comp].Conditions, *manySilent)
		}
	}
	if cache != nil {
		cache.gen++
		for i, name := range names {
			facts[i].usedGen, facts[i].usedStale, facts[i].usedRole = cache.gen, cfg.Stale(snap[name], now), snap[name].Role
			facts[i].usedSilence, facts[i].usedCordoned = cfg.silenceOf(snap[name], now), snap[name].Kube.Cordoned
		}
		cache.computed, cache.valid, cache.walked = len(names), true, false
	}
	return out
}

// nodesProjection combines a node-local component's node states into the
// component's state as a whole: Down only when it is Down on every node
// listed (a node whose state is Unknown is never counted Down), Degraded
// when it is Down or Degraded on some nodes, Unknown when every node that
// is not Healthy is Unknown, Healthy when all are. One node's failure is
// that node's, in status.nodes, not the cluster's.
func nodesProjection(nodes map[string]status.NodeState) (report.Status, string) {
	var down, bad, unknown int
	for _, ns := range nodes {
		switch ns.Status {
		case report.StatusDown:
			down++
		case report.StatusDegraded:
			bad++
		case report.StatusUnknown:
			unknown++
		}
	}
	switch {
	case down > 0 && down == len(nodes):
		return report.StatusDown, ReasonAllNodesDown
	case down+bad > 0:
		return report.StatusDegraded, ReasonNodesNotHealthy
	case unknown > 0:
		return report.StatusUnknown, ReasonNodesNotHealthy
	}
	return report.StatusHealthy, ReasonNodesHealthy
}

// freshUntil is the freshness bound of facts observed at observedAt.
func (c Config) freshUntil(observedAt time.Time) time.Time {
	return observedAt.Add(time.Duration(c.FreshForMultiple) * c.DefaultInterval)
}

func computeComponent(comp string, names []string, facts []*reportFacts, raft []quorum.Node, silences []*silence, reject rejectFunc, snap state.Snapshot, now time.Time, cfg Config) *status.Component {
	cs := &status.Component{Component: comp, Nodes: make(map[string]status.NodeState, len(names)), Conditions: make([]status.Condition, 0, 2*len(names))}
	var observedAt time.Time
	anyFresh := false
	for i, name := range names {
		e := snap[name]
		cf := facts[i].comps[comp]
		if cf == nil {
			continue
		}
		if sil := silences[i]; sil != nil {
			var last time.Time
			if e.Report != nil {
				last = e.ReceivedAt
			}
			// The entry says why the node is silent; the Heartbeat
			// condition says what is known of the node itself: a node in
			// maintenance keeps its kubelet's fact there, which is what
			// pages once the maintenance outlasts its window.
			cond := *sil
			if sil.reason == report.ReasonPlannedMaintenance {
				cond = silence{reason: report.ReasonHeartbeatMissed, message: sil.message}
				if alive, known := e.Kube.LeaseAlive(now); known && alive {
					cond.reason = report.ReasonAgentSilent
				} else if known {
					cond.reason = report.ReasonNodeUnreachable
				}
			}
			cs.Nodes[name] = status.NodeState{Status: report.StatusUnknown, Reason: sil.reason, Message: sil.message, LastReportAt: last}
			cs.Conditions = append(cs.Conditions, status.Condition{Type: TypeHeartbeat, Severity: report.StatusUnknown, Reason: cond.reason, Message: cond.message, Node: name})
			continue
		}
		anyFresh = true
		if e.ReceivedAt.After(observedAt) {
			observedAt = e.ReceivedAt
		}
		// A fresh node's entry carries no lastReportAt: it was heard within
		// the grace of observedAt, and its exact time is the metric
		// cozy_health_node_last_report_timestamp_seconds. Only a node that
		// missed its heartbeat says when it was last heard (above).
		cs.Nodes[name] = maintenanceEntry(cf.state, e.Kube)
		cs.Conditions = append(cs.Conditions, cf.conds...)
	}
	if !anyFresh {
		observedAt = now
	}
	cs.ObservedAt = observedAt
	cs.FreshUntil = cfg.freshUntil(observedAt)

	switch {
	case !anyFresh:
		cs.Overall, cs.Reason = report.StatusUnknown, report.ReasonNoData
		cs.Conditions = append(cs.Conditions, status.Condition{Type: TypeData, Severity: report.StatusUnknown, Reason: report.ReasonNoData,
			Message: fmt.Sprintf("no fresh %s observation from any node", comp)})
	case comp == report.ComponentEtcd:
		effect, reason, conds := etcdQuorum(raft, reject)
		cs.Conditions = append(cs.Conditions, conds...)
		cs.Overall, cs.Reason = effect, reason
		// The member's other checks (fsync latency, alarms) combine worst
		// wins below the projection: a Degraded or Down one makes etcd at
		// most Degraded (it still serves, with less margin); an Unknown one
		// keeps a Healthy projection from reading Healthy, as one Unknown
		// node keeps a node-local component from it: that fact is missing.
		switch other := worstOtherEtcdCheck(raft, snap); {
		case other.Rank() >= report.StatusDegraded.Rank() && effect.Rank() < report.StatusDegraded.Rank():
			cs.Overall, cs.Reason = report.StatusDegraded, ReasonCheckDegraded
		case other == report.StatusUnknown && effect == report.StatusHealthy:
			cs.Overall, cs.Reason = report.StatusUnknown, ReasonCheckUnknown
		}
	default:
		cs.Overall, cs.Reason = nodesProjection(cs.Nodes)
		if comp == report.ComponentKubeOVN {
			effect, reason, conds := ovnCentralQuorum(raft, reject)
			cs.Conditions = append(cs.Conditions, conds...)
			// A quorum that is not Healthy names the reason when it is at
			// least as bad as the nodes: it says more than NodesNotHealthy.
			if effect != report.StatusHealthy && effect.Rank() >= cs.Overall.Rank() {
				cs.Overall, cs.Reason = effect, reason
			}
		}
	}
	if comp == report.ComponentNode {
		if c := partitionCondition(names, snap, cfg.Replica); c != nil {
			cs.Conditions = append(cs.Conditions, *c)
		}
	}
	// Conditions are in node order here; Compact sorts what is written.
	return cs
}

// ConditionType turns a kebab-case check name into a condition type:
// fsync-latency -> FsyncLatency. Characters other than letters and digits
// separate words; a name that does not start with a letter gets "Check".
func ConditionType(check string) string {
	var b strings.Builder
	upper := true
	for _, r := range check {
		switch {
		case r >= 'a' && r <= 'z':
			if upper {
				r -= 'a' - 'A'
			}
			b.WriteRune(r)
			upper = false
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			b.WriteRune(r)
			upper = false
		default:
			upper = true
		}
	}
	s := b.String()
	if s == "" || s[0] < 'A' || s[0] > 'Z' {
		s = "Check" + s
	}
	return s
}

// sortConditions orders conditions: component-level first, then by type,
// then by node.
func sortConditions(cs []status.Condition) {
	sort.SliceStable(cs, func(i, j int) bool {
		a, b := cs[i], cs[j]
		if (a.Node == "") != (b.Node == "") {
			return a.Node == ""
		}
		if a.Type != b.Type {
			return a.Type < b.Type
		}
		if a.Node != b.Node {
			return a.Node < b.Node
		}
		return a.ResourceKey() < b.ResourceKey()
	})
}

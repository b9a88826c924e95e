// Package soak runs the lab (test/lab) under a scripted, seeded fault
// schedule and measures truth over time: a sampler reads every platform
// Health object, the leader's cozy_health_component_status series and the
// drain verdict of every node once a second, compares them with the truth
// the schedule knows, and counts seconds of false green (Healthy/safe
// while the truth is worse) and false red (Down/blocked while the truth is
// better), and the time to the right answer against a documented bound.
// `make soak` runs it for 20 minutes; TestSoakShort runs a short variant in
// `make test`. docs/soak.md describes the rules.
package soak

import (
	"sort"
	"strings"
	"time"
)

// Observed states. Health statuses are the API's; drain verdicts are the
// drain-check answer's; NoAnswer is a read that failed (no object, no
// aggregator answering): it is never green and never red.
const (
	Healthy  = "Healthy"
	Degraded = "Degraded"
	Down     = "Down"
	Unknown  = "Unknown"
	Safe     = "safe"
	Blocked  = "blocked"
	Undecide = "unknown"
	NoAnswer = "no-answer"
)

// Nodes is the lab's size the truths are written for: three nodes, each an
// etcd voter and an ovn-central member, each LINSTOR resource on two of
// them with the third as tie-breaker. With learners or more nodes some
// truths would differ (draining a learner is safe while a voter is down).
const Nodes = 3

// Components are the platform Health objects the soak judges.
var Components = []string{"etcd", "disk", "cilium", "kube-ovn", "linstor", "node"}

// Set is a set of accepted states.
type Set []string

// Has tells whether s accepts v.
func (s Set) Has(v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func (s Set) union(o Set) Set {
	out := append(Set(nil), s...)
	for _, v := range o {
		if !out.Has(v) {
			out = append(out, v)
		}
	}
	return out
}

func (s Set) String() string {
	c := append([]string(nil), s...)
	sort.Strings(c)
	return strings.Join(c, "|")
}

// Truth is what the schedule knows while a fault (or nothing) is on: the
// states each component's overall may read and the verdicts each node's
// drain check may give. A component or node not listed must read
// Healthy / safe. Where the rollup contract (DESIGN.md) admits more than
// one answer, the set lists each; a set never holds Healthy or safe
// unless the truth is that good.
type Truth struct {
	Components map[string]Set
	Drain      map[string]Set
	// Entries, where set, are the states a node's own entry
	// (status.nodes[node]) of a component may read: component -> node ->
	// set. Entries not listed are not judged.
	Entries map[string]map[string]Set
	// Reasons, where set, is the reason every judged entry of a node
	// (Entries) must carry once the truth is read: node -> reason (a
	// silent node's AgentSilent, NodeUnreachable, ManyNodesSilent,
	// PlannedMaintenance). A wrong reason is neither green nor red: it
	// keeps the sample off the truth.
	Reasons map[string]string
}

// Entry returns the accepted states of node's entry in component c, nil
// when not judged.
func (t Truth) Entry(c, node string) Set {
	return t.Entries[c][node]
}

// Component returns the accepted overall states of c.
func (t Truth) Component(c string) Set {
	if s, ok := t.Components[c]; ok {
		return s
	}
	return Set{Healthy}
}

// DrainOf returns the accepted drain verdicts of node.
func (t Truth) DrainOf(node string) Set {
	if s, ok := t.Drain[node]; ok {
		return s
	}
	return Set{Safe}
}

// Baseline is the truth with no fault on: everything Healthy, every node
// safe to drain (3 voting members, 2 diskful replicas per resource).
var Baseline = Truth{}

// Bound classes: the documented detection bounds, one table (docs/soak.md
// reproduces it). The lab's agents report every 2 s with a 2 s check
// deadline, the heartbeat grace is 3 intervals (6 s), the Lease lasts 6 s,
// the leader writes under its token bucket; each bound adds room for the
// writer's path and the 1 s sampling on a loaded 2-core machine, as the
// e2e fault matrix's bounds do.
const (
	// ClassSource: a source's state changes (a process stopped, a status
	// flipped, a call hanging): next report (2 s) + check deadline (2 s) +
	// rollup and write budget + drain snapshot. e2e boundFault.
	ClassSource = "source"
	// ClassSilent: an agent killed, frozen or stopped: heartbeat grace
	// (3 x 2 s) from its last report + rollup + write budget + drain
	// snapshot. e2e boundHeartbeat (15 s, Health entries) plus boundFault
	// for the drain verdict, as e2e's drain sub-test allows.
	ClassSilent = "silent"
	// ClassLeader: the aggregator leader killed: nothing the truth says
	// changes; the bound is how long the objects may go unwritten before a
	// new leader writes (lease 6 s + retry + write), as e2e asserts.
	ClassLeader = "leader"
	// ClassMaintenance: a node taken down for planned maintenance
	// (cordoned, agent and kubelet stopped, etcd stopped, relay cut): as
	// ClassSilent, the node's entries then read PlannedMaintenance.
	ClassMaintenance = "maintenance"
	// ClassUpgrade: one process of a rolling upgrade (or rollback)
	// restarted from another release's binary: nothing the truth says
	// changes; the bound is a restarted aggregator's warm-up (its agents
	// reconnect, then it is ready) or a restarted agent's first report,
	// within a silent node's bound.
	ClassUpgrade = "upgrade"
	// ClassRecover: a fault repaired until every object reads the baseline
	// again (real etcd and ovsdb members rejoin, agents reconnect).
	// e2e boundRecover.
	ClassRecover = "recover"
)

// Bounds is the one table of detection bounds, by class.
var Bounds = map[string]time.Duration{
	ClassSource:  30 * time.Second,
	ClassSilent:  45 * time.Second,
	ClassLeader:  30 * time.Second,
	ClassRecover: 60 * time.Second,
	// The same bound as a silent node's: the reason comes with the
	// heartbeat grace's Unknown.
	ClassMaintenance: 45 * time.Second,
	ClassUpgrade:     45 * time.Second,
}

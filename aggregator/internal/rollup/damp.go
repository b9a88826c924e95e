package rollup

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cozystack/cozy-health/aggregator/internal/status"
	"github.com/cozystack/cozy-health/pkg/report"
)

// Holds are the damping hold times: how long a transition to a worse state
// must persist before it is published, by the state transitioned to.
type Holds struct {
	Degraded time.Duration
	Down     time.Duration
	Unknown  time.Duration
}

// For is the hold time of a worsening to s. Healthy is never held.
func (h Holds) For(s report.Status) time.Duration {
	switch s {
	case report.StatusDegraded:
		return h.Degraded
	case report.StatusDown:
		return h.Down
	case report.StatusUnknown:
		return h.Unknown
	}
	return 0
}

// Track is the damping record of one published fact (a component's
// overall, one node state, one condition).
type Track struct {
	// Published is the status last published; Since is when it was first
	// published (the last transition).
	Published report.Status
	Since     time.Time
	// Worsening is set while the desired status has been continuously worse
	// than Published since WorseSince.
	Worsening  bool
	WorseSince time.Time
}

// Step is the damping rule, applied to one fact at every rollup:
//
//   - The first time a fact is seen, its desired status is published at once.
//   - A desired status as good as or better than the published one (a
//     recovery, or no change) is published at once.
//   - A desired status worse than the published one is published only once
//     the desired status has been worse than the published one, without
//     interruption, for at least the hold time of the desired status
//     (Holds.For). Until then the previously published fact (status,
//     reason, message) stays published. If the worsening goes away the
//     clock restarts.
//
// Step reports whether the desired fact is published (publish) or the
// previous one is kept.
func Step(t Track, seen bool, desired report.Status, now time.Time, h Holds) (next Track, publish bool) {
	if !seen {
		return Track{Published: desired, Since: now}, true
	}
	if desired.Rank() <= t.Published.Rank() {
		if desired != t.Published {
			t.Published, t.Since = desired, now
		}
		t.Worsening = false
		return t, true
	}
	if !t.Worsening {
		t.Worsening, t.WorseSince = true, now
	}
	if now.Sub(t.WorseSince) >= h.For(desired) {
		return Track{Published: desired, Since: now}, true
	}
	return t, false
}

type trackedNode struct {
	Track
	value status.NodeState
	gen   uint64
}

type trackedCond struct {
	Track
	value status.Condition
	gen   uint64
}

type trackedOverall struct {
	Track
	reason string
}

// Damper applies Step to every fact of every component. It is the only
// stateful part of the rollup; it is not safe for concurrent use.
type Damper struct {
	// gen increases with every Apply; entries not touched by the current
	// generation are gone from the input and are forgotten.
	gen     uint64
	holds   Holds
	overall map[string]*trackedOverall
	nodes   map[string]map[string]*trackedNode
	conds   map[string]map[condKey]*trackedCond
	// summaries remembers, per component and summary condition type, the
	// last status and when it changed (summaries are derived from damped
	// facts, so they are stamped, not held).
	summaries map[string]map[string]*Track
	// worsening counts, per component, the facts the last Apply held.
	worsening map[string]int
	// seeds are the conditions the Health objects carried when this
	// replica started (Seed), by component; consulted until seedsUntil.
	seeds      map[string]map[SeedKey]Seed
	seedsUntil time.Time
}

// SeedKey names a published condition as the Health object does: its type
// and resourceRef (empty for a component-level condition).
type SeedKey struct{ Type, Kind, Name, Namespace string }

// Seed is a condition as a Health object already carries it.
type Seed struct {
	// Status is the condition's status: True, False or Unknown.
	Status         metav1.ConditionStatus
	Reason         string
	LastTransition time.Time
}

// Seed gives the damper the conditions the component's Health object
// carries, written by an earlier leader: until `until`, a condition this
// replica publishes for the first time, or whose status changes (its view
// still filling during the warm-up), keeps the object's lastTransitionTime
// when it says the same (status and reason). So a new replica taking over
// does not restart every "since" at its own start; the damper's holds are
// not seeded (they restart).
func (d *Damper) Seed(component string, seeds map[SeedKey]Seed, until time.Time) {
	if d.seeds == nil {
		d.seeds = map[string]map[SeedKey]Seed{}
	}
	d.seeds[component] = seeds
	d.seedsUntil = until
}

// seeded is the time a transition of c at now takes: the seed's, when one
// says the same, else now.
func (d *Damper) seeded(comp string, c *status.Condition, now time.Time) time.Time {
	if d.seeds == nil {
		return now
	}
	k := SeedKey{Type: c.Type}
	switch {
	case c.Resource != nil:
		k.Kind, k.Name, k.Namespace = c.Resource.Kind, c.Resource.Name, c.Resource.Namespace
	case c.Node != "":
		k.Kind, k.Name = report.KindNode, c.Node
	}
	if s, ok := d.seeds[comp][k]; ok && s.Status == c.ConditionStatus() && s.Reason == c.Reason && s.LastTransition.Before(now) {
		return s.LastTransition
	}
	return now
}

type condKey struct{ typ, node, resource string }

// NewDamper returns a Damper with the given hold times.
func NewDamper(h Holds) *Damper {
	return &Damper{holds: h, overall: map[string]*trackedOverall{}, nodes: map[string]map[string]*trackedNode{}, conds: map[string]map[condKey]*trackedCond{}, summaries: map[string]map[string]*Track{}, worsening: map[string]int{}}
}

// Apply damps cs (as Compute returned it) in place at now: held facts are
// replaced by their previously published values, and every condition gets
// its LastTransition. Facts that are no longer present are forgotten.
func (d *Damper) Apply(cs *status.Component, now time.Time) {
	if d.seeds != nil && now.After(d.seedsUntil) {
		d.seeds = nil
	}
	// gen marks the node states and conditions this Apply sees.
	d.gen++
	desired, desiredReason := cs.Overall, cs.Reason
	held := d.applyOverall(cs, now)
	held += d.applyNodes(cs, now)
	floorOverall(cs, desired, desiredReason)
	held += d.applyConditions(cs, now)
	d.worsening[cs.Component] = held
}

// floorOverall keeps a held overall from contradicting the node states
// published beside it. The overall and each node state are damped on their
// own, by the state each worsens to: a silent node's entries turn
// Unknown/HeartbeatMissed at once (no Unknown hold) while etcd's worsening
// to Degraded (the quorum at risk) is held, and a node-local component one
// of whose nodes is Down worsens to Degraded, held, while that node's Down
// entry is not. Published as they are, the object would read Healthy
// beside a node that is Unknown or Down. So the overall published is never
// better than the better of what Compute desired and the worst node state
// published: the facts behind a held worsening that are themselves
// published show in the overall at once, and a worsening whose facts are
// all held (a node's disk turning Degraded) stays held.
func floorOverall(cs *status.Component, desired report.Status, desiredReason string) {
	worst := report.StatusHealthy
	for _, ns := range cs.Nodes {
		worst = report.Worse(worst, ns.Status)
	}
	floor := desired
	if worst.Rank() < floor.Rank() {
		floor = worst
	}
	if floor.Rank() <= cs.Overall.Rank() {
		return
	}
	cs.Overall, cs.Reason = floor, desiredReason
	if floor != desired {
		cs.Reason = ReasonNodesNotHealthy
	}
}

// releases tells whether a condition whose worsening to desired is held
// must be published at once because what it would keep published (was) is
// greener than the node states already published beside it: the same floor
// as the overall's (floorOverall), for a condition pinned to a node by that
// node's published state, for any other by the worst published node state.
// Without it etcd's Quorum condition read True ("3 of 3 healthy") for the
// Degraded hold while member c's entry already read Unknown beside it. A
// condition whose facts are all held (node a's FsyncProbe turning
// Degraded, a's entry held too) stays held.
func releases(cs *status.Component, c *status.Condition, was report.Status) bool {
	worst := report.StatusHealthy
	if c.Node != "" {
		if ns, ok := cs.Nodes[c.Node]; ok {
			worst = ns.Status
		}
	} else {
		for _, ns := range cs.Nodes {
			worst = report.Worse(worst, ns.Status)
		}
	}
	floor := c.Severity
	if worst.Rank() < floor.Rank() {
		floor = worst
	}
	return was.Rank() < floor.Rank()
}

// applyOverall damps the component's overall and reason; it returns 1
// while a worsening of it is held.
func (d *Damper) applyOverall(cs *status.Component, now time.Time) (held int) {
	to, seen := d.overall[cs.Component]
	if !seen {
		to = &trackedOverall{}
		d.overall[cs.Component] = to
	}
	next, pub := Step(to.Track, seen, cs.Overall, now, d.holds)
	to.Track = next
	if next.Worsening {
		held++
	}
	if pub {
		to.reason = cs.Reason
	} else {
		cs.Overall, cs.Reason = to.Published, to.reason
	}
	return held
}

// applyNodes damps every node state (a held one keeps its published
// status, reason and message, with the current lastReportAt) and forgets
// nodes that are gone; it returns how many worsenings it holds.
func (d *Damper) applyNodes(cs *status.Component, now time.Time) (held int) {
	nodes := d.nodes[cs.Component]
	if nodes == nil {
		nodes = map[string]*trackedNode{}
		d.nodes[cs.Component] = nodes
	}
	for name, ns := range cs.Nodes {
		tn, seen := nodes[name]
		if !seen {
			tn = &trackedNode{}
			nodes[name] = tn
		}
		tn.gen = d.gen
		next, pub := Step(tn.Track, seen, ns.Status, now, d.holds)
		tn.Track = next
		if next.Worsening {
			held++
		}
		if pub {
			tn.value = ns
		} else {
			kept := tn.value
			kept.LastReportAt = ns.LastReportAt
			cs.Nodes[name] = kept
		}
	}
	if len(nodes) != len(cs.Nodes) {
		for name, tn := range nodes {
			if tn.gen != d.gen {
				delete(nodes, name)
			}
		}
	}
	return held
}

// applyConditions damps every condition (a held one is replaced whole by
// the published one, unless releases says the node states published beside
// it already read worse), stamps its LastTransition (from the seed when a new
// fact says what the object already says) and forgets conditions that are
// gone; it returns how many worsenings it holds.
func (d *Damper) applyConditions(cs *status.Component, now time.Time) (held int) {
	comp := cs.Component
	conds := d.conds[comp]
	if conds == nil {
		conds = map[condKey]*trackedCond{}
		d.conds[comp] = conds
	}
	live := 0
	for i := range cs.Conditions {
		c := &cs.Conditions[i]
		k := condKey{c.Type, c.Node, c.ResourceKey()}
		tc, seen := conds[k]
		if !seen {
			tc = &trackedCond{}
			conds[k] = tc
		}
		if tc.gen != d.gen {
			live++
		}
		tc.gen = d.gen
		next, pub := Step(tc.Track, seen, c.Severity, now, d.holds)
		if !pub && releases(cs, c, next.Published) {
			next, pub = Track{Published: c.Severity, Since: now}, true
		}
		tc.Track = next
		if next.Worsening {
			held++
		}
		if pub {
			if next.Since.Equal(now) {
				tc.Since = d.seeded(comp, c, now)
			}
			tc.value = *c
		} else {
			*c = tc.value
		}
		c.LastTransition = tc.Since
	}
	if len(conds) != live {
		for k, tc := range conds {
			if tc.gen != d.gen {
				delete(conds, k)
			}
		}
	}
	return held
}

// Holding tells whether the last Apply of any component held a fact back:
// while it does, the passing of time alone can change the published
// answer.
func (d *Damper) Holding() bool {
	for _, n := range d.worsening {
		if n > 0 {
			return true
		}
	}
	return false
}

// Stamp gives the conditions Compact added (component-level, without a
// LastTransition) their last transition time: when their status last
// changed. Call it after Compact.
func (d *Damper) Stamp(cs *status.Component, now time.Time) {
	m := d.summaries[cs.Component]
	if m == nil {
		m = map[string]*Track{}
		d.summaries[cs.Component] = m
	}
	seen := map[string]bool{}
	for i := range cs.Conditions {
		c := &cs.Conditions[i]
		if !c.LastTransition.IsZero() || c.Node != "" {
			continue
		}
		seen[c.Type] = true
		tr, ok := m[c.Type]
		if !ok || tr.Published != c.Severity {
			tr = &Track{Published: c.Severity, Since: d.seeded(cs.Component, c, now)}
			m[c.Type] = tr
		}
		c.LastTransition = tr.Since
	}
	for ty := range m {
		if !seen[ty] {
			delete(m, ty)
		}
	}
}

package rollup

import (
	"time"

	"github.com/cozystack/cozy-health/aggregator/internal/quorum"
	"github.com/cozystack/cozy-health/aggregator/internal/state"
	"github.com/cozystack/cozy-health/aggregator/internal/status"
	"github.com/cozystack/cozy-health/pkg/report"
)

// Cache memoizes the per-report part of the rollup. The zero value is not
// usable; use NewCache.
type Cache struct {
	byNode map[string]*reportFacts
	// computed is how many nodes the last ComputeCached judged; each of
	// their facts carries what it used. valid once ComputeCached ran.
	computed int
	valid    bool
	// gen numbers the ComputeCached calls.
	gen uint64
	// onReject receives the raft claims the reader rejected (SetRejected).
	onReject rejectFunc

	// What the last Unchanged walk that answered true found, kept up to
	// date by UnchangedSince from the changed nodes alone; walked says it
	// holds (no ComputeCached since). latest is, per component, the latest
	// arrival of a fresh node's report; staleBy is no later than the
	// instant the first fresh node turns stale; walkedAt is the last now
	// it was checked at.
	walked bool
	// incremental counts the answers UnchangedSince gave without a walk.
	incremental int
	latest      [maxComponents]time.Time
	staleBy     time.Time
	walkedAt    time.Time
}

// SetRejected makes ComputeCached hand every raft claim the reader rejects
// to f (a quorum.Auditor's Reject); nil drops them.
func (c *Cache) SetRejected(f func(quorum.Rejection, string)) { c.onReject = f }

// NewCache returns an empty Cache.
func NewCache() *Cache {
	return &Cache{byNode: map[string]*reportFacts{}}
}

// Unchanged tells whether ComputeCached over nodes at now would give the
// same answer as the last call with the same cfg, except for observedAt
// and freshUntil, which move with every report: the same nodes, each
// judging the same (sameJudgement), each as fresh or stale as then and of
// the same role.
// When it would, it also returns those new times: observed, per
// component, the latest arrival of a fresh node's report (absent: no fresh
// node). Reports that changed are folded on the way, so a ComputeCached
// that follows a false answer finds them in the memo. It reads nodes in
// place (State.Read): one lookup per node, no copy. A true answer is what
// UnchangedSince builds on.
func (c *Cache) Unchanged(nodes map[string]state.Entry, now time.Time, cfg Config) (observed map[string]time.Time, unchanged bool) {
	c.walked = false
	if !c.valid || len(nodes) != c.computed {
		return nil, false
	}
	c.latest, c.staleBy = [maxComponents]time.Time{}, time.Time{}
	for name, e := range nodes {
		f, ok := c.byNode[name]
		if !ok || !c.sameAs(f, e, now, cfg) {
			return nil, false
		}
		c.note(f, e, now, cfg)
	}
	c.walked, c.walkedAt = true, now
	return c.observed(), true
}

// UnchangedSince is Unchanged for a caller that knows which nodes changed
// since its last call (State.ReadChanged): after an Unchanged walk that
// answered true, only those are compared, and every other node is as it
// was, so only the clock can have moved it: no fresh node turns stale
// before staleBy, and a stale node turns fresh only by a new report. Past
// staleBy (or with no walk to build on) it walks every node (Unchanged).
// Staleness stays time-driven: a node that stops reporting turns stale at
// the same instant either way.
func (c *Cache) UnchangedSince(nodes map[string]state.Entry, changed map[string]struct{}, now time.Time, cfg Config) (observed map[string]time.Time, unchanged bool) {
	if !c.walked || now.Before(c.walkedAt) || (!c.staleBy.IsZero() && now.After(c.staleBy)) {
		return c.Unchanged(nodes, now, cfg)
	}
	for name := range changed {
		e, ok := nodes[name]
		f, known := c.byNode[name]
		if !ok || !known || !c.sameAs(f, e, now, cfg) {
			// Added, removed or judged otherwise: recomputed.
			c.walked = false
			return nil, false
		}
		if e.ReceivedAt.Before(f.seenAt) {
			// An earlier arrival replaced a later one: latest may
			// have to go back, which only a walk finds.
			return c.Unchanged(nodes, now, cfg)
		}
		c.note(f, e, now, cfg)
	}
	c.walkedAt = now
	c.incremental++
	return c.observed(), true
}

// sameAs tells whether node entry e at now judges as f did in the last
// ComputeCached: f was judged then, and e is as stale and of the same role
// and its report judges the same (then f takes e's report).
func (c *Cache) sameAs(f *reportFacts, e state.Entry, now time.Time, cfg Config) bool {
	if f.usedGen != c.gen || cfg.Stale(e, now) != f.usedStale || e.Role != f.usedRole ||
		cfg.silenceOf(e, now) != f.usedSilence || e.Kube.Cordoned != f.usedCordoned {
		return false
	}
	if f.report != e.Report {
		if !sameJudgementAs(f.report, f.claims, e.Report) {
			return false
		}
		f.report = e.Report
	}
	return true
}

// note folds node entry e, judged as f, into c.latest and c.staleBy.
func (c *Cache) note(f *reportFacts, e state.Entry, now time.Time, cfg Config) {
	f.seenAt = e.ReceivedAt
	if f.usedStale {
		// A silent node's explanation changes by the clock when its
		// kubelet Lease expires.
		if at := cfg.nextSilenceChange(e, now); !at.IsZero() && (c.staleBy.IsZero() || at.Before(c.staleBy)) {
			c.staleBy = at
		}
		return
	}
	if at := staleAt(e, cfg); c.staleBy.IsZero() || at.Before(c.staleBy) {
		c.staleBy = at
	}
	for i := range c.latest {
		if f.present&(1<<i) != 0 && e.ReceivedAt.After(c.latest[i]) {
			c.latest[i] = e.ReceivedAt
		}
	}
}

// staleAt is the last instant at which a node with a report, e, is fresh
// (Config.Stale).
func staleAt(e state.Entry, cfg Config) time.Time {
	return e.ReceivedAt.Add(cfg.Grace(e.Report.Interval))
}

// observed is c.latest by component name, the zero ones left out.
func (c *Cache) observed() map[string]time.Time {
	observed := make(map[string]time.Time, len(componentIndex))
	for comp, i := range componentIndex {
		if !c.latest[i].IsZero() {
			observed[comp] = c.latest[i]
		}
	}
	return observed
}

// Retime returns the answer of ComputeCached for nodes the cache found
// Unchanged: prev (the last answer, damped and compacted or not) with
// observedAt and freshUntil from Unchanged's observed. Nodes and conditions
// are shared with prev, not copied; neither is modified.
func Retime(prev map[string]*status.Component, observed map[string]time.Time, now time.Time, cfg Config) map[string]*status.Component {
	out := make(map[string]*status.Component, len(prev))
	for comp, cs := range prev {
		next := *cs
		at, fresh := observed[comp]
		if !fresh {
			at = now
		}
		next.ObservedAt, next.FreshUntil = at, cfg.freshUntil(at)
		out[comp] = &next
	}
	return out
}

// maxComponents bounds report.NodeComponents (reportFacts.present is a
// uint8).
const maxComponents = 8

// componentIndex numbers report.NodeComponents for reportFacts.present.
var componentIndex = func() map[string]int {
	if len(report.NodeComponents) > maxComponents {
		panic("rollup: more node components than reportFacts.present holds")
	}
	m := make(map[string]int, len(report.NodeComponents))
	for i, c := range report.NodeComponents {
		m[c] = i
	}
	return m
}()

// sameJudgement tells whether two reports of a node fold into the same
// facts: the same observations in the same order, equal in everything
// factsOf reads, and the same raft claims (quorum.ClaimsOf, the one reader
// the quorum rule reads through: whatever fact it reads, this compares).
// The message of a Healthy observation is not read (a Healthy condition
// carries none), nor are attributes (quorum.Attributes are read through
// the claims; the others are for people and drain rules).
func sameJudgement(a, b *report.NodeReport) bool {
	return sameJudgementAs(a, quorum.ClaimsOf(a), b)
}

// sameJudgementAs is sameJudgement with a's claims already read (the
// memo's): one report per node per interval is compared, and reading the
// claims allocates.
func sameJudgementAs(a *report.NodeReport, aClaims *quorum.Claims, b *report.NodeReport) bool {
	if a == nil || b == nil {
		// Without a report (an expected node never heard) the node is
		// always stale; one with a report is judged on it.
		return a == b
	}
	if len(a.Observations) != len(b.Observations) {
		return false
	}
	for i := range a.Observations {
		x, y := &a.Observations[i], &b.Observations[i]
		if x.Component != y.Component || x.Check != y.Check || x.Status != y.Status || x.Reason != y.Reason {
			return false
		}
		if x.Status != report.StatusHealthy && x.Message != y.Message {
			return false
		}
		if (x.ResourceRef == nil) != (y.ResourceRef == nil) || (x.ResourceRef != nil && *x.ResourceRef != *y.ResourceRef) {
			return false
		}
	}
	return aClaims.Equal(quorum.ClaimsOf(b))
}

// reportFacts is what one report says, per component, about its node when
// the node is fresh.
type reportFacts struct {
	report *report.NodeReport
	comps  map[string]*componentFacts
	// present has bit componentIndex[c] set for every c in comps.
	present uint8
	// claims are the report's raft claims (quorum.ClaimsOf).
	claims *quorum.Claims
	// usedGen, usedStale and usedRole: the ComputeCached call that last
	// judged these facts, whether the node was stale then, and its role.
	usedGen   uint64
	usedStale bool
	usedRole  state.Role
	// usedSilence and usedCordoned: how that call explained the node's
	// silence (silenceOf) and whether it was cordoned.
	usedSilence  silenceKind
	usedCordoned bool
	// seenAt is the node's arrival time the last Unchanged or
	// UnchangedSince saw.
	seenAt time.Time
}

type componentFacts struct {
	conds []status.Condition
	state status.NodeState // LastReportAt is filled by the caller
}

func (c *Cache) get(node string, r *report.NodeReport) *reportFacts {
	if c != nil {
		if f, ok := c.byNode[node]; ok {
			if f.report == r {
				return f
			}
			if sameJudgementAs(f.report, f.claims, r) {
				// A new report that judges the same: same facts.
				f.report = r
				return f
			}
		}
	}
	f := factsOf(node, r)
	if c != nil {
		c.byNode[node] = f
	}
	return f
}

func (c *Cache) sweep(snap state.Snapshot) {
	if c == nil || len(c.byNode) == len(snap) {
		return
	}
	for n := range c.byNode {
		if _, ok := snap[n]; !ok {
			delete(c.byNode, n)
		}
	}
}

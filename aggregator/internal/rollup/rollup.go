// Package rollup turns a state snapshot into the desired status of every
// node-local component. Compute is a pure function of (snapshot, now,
// config): every replica computes the same answer from the same reports, and
// golden files pin it down. Damping (damp.go) and compaction (compact.go)
// are separate, equally explicit steps.
//
// The contract (DESIGN.md, "Rollup contract"):
//   - Precedence, worst wins: Down > Degraded > Unknown > Healthy.
//   - A component no fresh node observed is Unknown with reason NoData,
//     never Healthy.
//   - A node with no accepted report within the heartbeat grace (default 3x
//     the interval the node reports) has every entry Unknown with reason
//     HeartbeatMissed and the time it was last heard. A node Kubernetes
//     lists from which this replica accepted no report at all (an entry
//     without a report) is such a node from the start, without a time; as
//     nothing is known of its components, only the node component lists it.
//   - etcd is judged on the quorum projection: with V voting members and H
//     healthy voting members it is Healthy when H >= V, Degraded when
//     H >= floor(V/2)+1 and Down below. Learners do not vote; a member whose
//     node is stale or whose etcd-member observation is not Healthy is not
//     counted healthy. V comes from the etcd-membership observation
//     (votingMembers, the largest any fresh node reports); when no fresh
//     node sends one, V is the number of nodes whose latest report has an
//     etcd-member observation that is not a learner. Any other etcd check
//     (fsync latency, alarms) that is Degraded or Down on a fresh node
//     degrades etcd to at most Degraded: the component still serves, its
//     margin is reduced; only the projection can make etcd Down.
//   - Every other component is the worst of its node states.
//   - A node state is the worst of the node's conditions for the component.
//   - Conditions: one per (node, check), type = CamelCase(check), pinned to
//     the node (ResourceRef{Kind: Node}); several observations of one check
//     on one node (one per DRBD resource or block device) fold into one
//     condition with the worst status whose message names the resources
//     that are not Healthy. Each of those resources also gets a condition of
//     its own, pinned to the resource (ResourceRef{Kind: Resource, Name:
//     pvc-...}), so a consumer finds the broken resource without parsing a
//     message. Status True = Healthy, False = Degraded or Down,
//     Unknown = Unknown.
package rollup

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/cozystack/cozy-health/aggregator/internal/state"
	"github.com/cozystack/cozy-health/pkg/report"
)

// Condition types the rollup adds beyond CamelCase(check).
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
	ReasonNodesHealthy    = "AllNodesHealthy"
	ReasonNodesNotHealthy = "NodesNotHealthy"
	ReasonNotAMember      = "NotReporting"
)

// MaxMessage is the longest message written for one condition or node state.
const MaxMessage = 256

// Config is what the rollup is judged against.
type Config struct {
	// HeartbeatGrace is the silence after which a node is stale; 0 means 3x
	// the interval the node reports (DefaultInterval when it reports none).
	HeartbeatGrace time.Duration
	// DefaultInterval is the agents' configured interval; it is the unit of
	// FreshForMultiple.
	DefaultInterval time.Duration
	// FreshForMultiple: FreshUntil = ObservedAt + FreshForMultiple x DefaultInterval.
	FreshForMultiple int
}

// NodeState is a component's state on one node.
type NodeState struct {
	Status       report.Status `json:"status"`
	Reason       string        `json:"reason,omitempty"`
	Message      string        `json:"message,omitempty"`
	LastReportAt time.Time     `json:"lastReportAt"`
}

// Condition is one fact about a component. Node is the node it is pinned to
// (ResourceRef{Kind: Node, Name: Node}); empty for component-level facts.
type Condition struct {
	Type string `json:"type"`
	// Severity is the status behind the condition; ConditionStatus derives
	// True/False/Unknown from it.
	Severity report.Status `json:"severity"`
	Reason   string        `json:"reason,omitempty"`
	Message  string        `json:"message,omitempty"`
	Node     string        `json:"node,omitempty"`
	// Resource, when set, pins the condition to a resource other than the
	// node (a DRBD resource, a block device) observed on Node.
	Resource       *report.ResourceRef `json:"resource,omitempty"`
	LastTransition time.Time           `json:"lastTransition,omitzero"`
}

// ResourceKey names a condition's resource for keys and sorting; empty for
// conditions pinned to a node or to nothing.
func (c Condition) ResourceKey() string {
	if c.Resource == nil {
		return ""
	}
	return c.Resource.Kind + "/" + c.Resource.Namespace + "/" + c.Resource.Name
}

// ConditionStatus is True (good), False (bad) or Unknown (no data).
func (c Condition) ConditionStatus() string {
	return conditionStatus(c.Severity)
}

func conditionStatus(s report.Status) string {
	switch s {
	case report.StatusHealthy:
		return "True"
	case report.StatusUnknown:
		return "Unknown"
	default:
		return "False"
	}
}

// ComponentStatus is the desired status of one component's Health object.
type ComponentStatus struct {
	Component  string               `json:"component"`
	Overall    report.Status        `json:"overall"`
	Reason     string               `json:"reason"`
	ObservedAt time.Time            `json:"observedAt"`
	FreshUntil time.Time            `json:"freshUntil"`
	Nodes      map[string]NodeState `json:"nodes,omitempty"`
	Conditions []Condition          `json:"conditions,omitempty"`
	// DegradedNodes and Issues are filled by Compact.
	DegradedNodes []string `json:"degradedNodes,omitempty"`
	Issues        int      `json:"issues"`
}

// Grace is the heartbeat grace of a node reporting at interval.
func (c Config) Grace(interval time.Duration) time.Duration {
	if c.HeartbeatGrace > 0 {
		return c.HeartbeatGrace
	}
	if interval <= 0 {
		interval = c.DefaultInterval
	}
	return 3 * interval
}

// NextStale is the earliest instant after now at which one of nodes that
// is fresh at now will have missed its heartbeat; the zero time when none
// is fresh.
func (c Config) NextStale(nodes map[string]state.Entry, now time.Time) time.Time {
	var next time.Time
	for _, e := range nodes {
		if c.Stale(e, now) {
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
func Compute(snap state.Snapshot, now time.Time, cfg Config) map[string]*ComponentStatus {
	return ComputeCached(snap, now, cfg, nil)
}

// ComputeCached is Compute with a memo of what each report says per
// component (folded conditions and node state), keyed by the report, which
// is immutable: only nodes whose report changed since the last call are
// folded again. The result is identical to Compute's. cache may be nil; a
// Cache must not be shared by concurrent calls.
func ComputeCached(snap state.Snapshot, now time.Time, cfg Config, cache *Cache) map[string]*ComponentStatus {
	names := snap.Names()
	facts := make([]*reportFacts, len(names))
	for i, name := range names {
		facts[i] = cache.get(name, snap[name].Report)
	}
	cache.sweep(snap)
	out := make(map[string]*ComponentStatus, len(report.NodeComponents))
	for _, comp := range report.NodeComponents {
		out[comp] = computeComponent(comp, names, facts, snap, now, cfg)
	}
	if cache != nil {
		cache.gen++
		for i, name := range names {
			facts[i].usedGen, facts[i].usedStale = cache.gen, cfg.Stale(snap[name], now)
		}
		cache.computed, cache.valid = len(names), true
	}
	return out
}

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
}

// NewCache returns an empty Cache.
func NewCache() *Cache {
	return &Cache{byNode: map[string]*reportFacts{}}
}

// Unchanged tells whether ComputeCached over nodes at now would give the
// same answer as the last call with the same cfg, except for observedAt
// and freshUntil, which move with every report: the same nodes, each
// judging the same (sameJudgement) and each as fresh or stale as then.
// When it would, it also returns those new times: observed, per
// component, the latest arrival of a fresh node's report (absent: no fresh
// node). Reports that changed are folded on the way, so a ComputeCached
// that follows a false answer finds them in the memo. It reads nodes in
// place (State.Read): one lookup per node, no copy.
func (c *Cache) Unchanged(nodes map[string]state.Entry, now time.Time, cfg Config) (observed map[string]time.Time, unchanged bool) {
	if !c.valid || len(nodes) != c.computed {
		return nil, false
	}
	var latest [maxComponents]time.Time
	for name, e := range nodes {
		f, ok := c.byNode[name]
		if !ok || f.usedGen != c.gen {
			return nil, false
		}
		stale := cfg.Stale(e, now)
		if stale != f.usedStale {
			return nil, false
		}
		if f.report != e.Report {
			if !sameJudgement(f.report, e.Report) {
				return nil, false
			}
			f.report = e.Report
		}
		if stale {
			continue
		}
		for i := range latest {
			if f.present&(1<<i) != 0 && e.ReceivedAt.After(latest[i]) {
				latest[i] = e.ReceivedAt
			}
		}
	}
	observed = make(map[string]time.Time, len(componentIndex))
	for comp, i := range componentIndex {
		if !latest[i].IsZero() {
			observed[comp] = latest[i]
		}
	}
	return observed, true
}

// Retime returns the answer of ComputeCached for nodes the cache found
// Unchanged: prev (the last answer, damped and compacted or not) with
// observedAt and freshUntil from Unchanged's observed. Nodes and conditions
// are shared with prev, not copied; neither is modified.
func Retime(prev map[string]*ComponentStatus, observed map[string]time.Time, now time.Time, cfg Config) map[string]*ComponentStatus {
	out := make(map[string]*ComponentStatus, len(prev))
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

// freshUntil is the freshness bound of facts observed at observedAt.
func (c Config) freshUntil(observedAt time.Time) time.Time {
	return observedAt.Add(time.Duration(c.FreshForMultiple) * c.DefaultInterval)
}

// judgedAttributes are the attributes the rollup reads (etcdQuorum); the
// others are for people and drain rules.
var judgedAttributes = [...]string{report.AttrIsLearner, report.AttrVotingMembers}

// sameJudgement tells whether two reports of a node fold into the same
// facts: the same observations in the same order, equal in everything
// factsOf and etcdQuorum read. The message of a Healthy observation is not
// read (a Healthy condition carries none), nor are attributes other than
// judgedAttributes.
func sameJudgement(a, b *report.NodeReport) bool {
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
		for _, k := range judgedAttributes {
			vx, okx := x.Attributes[k]
			vy, oky := y.Attributes[k]
			if okx != oky || vx != vy {
				return false
			}
		}
	}
	return true
}

// reportFacts is what one report says, per component, about its node when
// the node is fresh.
type reportFacts struct {
	report *report.NodeReport
	comps  map[string]*componentFacts
	// present has bit componentIndex[c] set for every c in comps.
	present uint8
	// usedGen and usedStale: the ComputeCached call that last judged these
	// facts, and whether the node was stale then.
	usedGen   uint64
	usedStale bool
}

type componentFacts struct {
	conds []Condition
	state NodeState // LastReportAt is filled by the caller
}

func (c *Cache) get(node string, r *report.NodeReport) *reportFacts {
	if c != nil {
		if f, ok := c.byNode[node]; ok {
			if f.report == r {
				return f
			}
			if sameJudgement(f.report, r) {
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

// factsOf folds a report's observations per component.
func factsOf(node string, r *report.NodeReport) *reportFacts {
	byComp := map[string][]report.Observation{}
	var obs []report.Observation
	if r != nil {
		obs = r.Observations
	}
	for _, o := range obs {
		byComp[o.Component] = append(byComp[o.Component], o)
	}
	f := &reportFacts{report: r, comps: make(map[string]*componentFacts, len(byComp)+1)}
	for _, comp := range report.NodeComponents {
		obs := byComp[comp]
		if len(obs) == 0 && comp != report.ComponentNode {
			continue
		}
		conds := foldChecks(node, obs)
		if comp == report.ComponentNode {
			conds = append(conds, Condition{Type: TypeHeartbeat, Severity: report.StatusHealthy, Reason: ReasonReportReceived, Message: "report received", Node: node})
		}
		f.comps[comp] = &componentFacts{conds: conds, state: nodeStateOf(conds, time.Time{})}
		f.present |= 1 << componentIndex[comp]
	}
	return f
}

func computeComponent(comp string, names []string, facts []*reportFacts, snap state.Snapshot, now time.Time, cfg Config) *ComponentStatus {
	cs := &ComponentStatus{Component: comp, Nodes: make(map[string]NodeState, len(names)), Conditions: make([]Condition, 0, 2*len(names))}
	var observedAt time.Time
	anyFresh := false
	for i, name := range names {
		e := snap[name]
		cf := facts[i].comps[comp]
		if cf == nil {
			continue
		}
		if cfg.Stale(e, now) {
			var msg string
			var last time.Time
			if e.Report == nil {
				msg = fmt.Sprintf("no report from this node's agent since this aggregator learned of the node at %s", e.ReceivedAt.UTC().Format(time.RFC3339))
			} else {
				msg = fmt.Sprintf("no valid report since %s (grace %s)", e.ReceivedAt.UTC().Format(time.RFC3339), cfg.Grace(e.Report.Interval))
				last = e.ReceivedAt
			}
			cs.Nodes[name] = NodeState{Status: report.StatusUnknown, Reason: report.ReasonHeartbeatMissed, Message: msg, LastReportAt: last}
			cs.Conditions = append(cs.Conditions, Condition{Type: TypeHeartbeat, Severity: report.StatusUnknown, Reason: report.ReasonHeartbeatMissed, Message: msg, Node: name})
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
		cs.Nodes[name] = cf.state
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
		cs.Conditions = append(cs.Conditions, Condition{Type: TypeData, Severity: report.StatusUnknown, Reason: report.ReasonNoData,
			Message: fmt.Sprintf("no fresh %s observation from any node", comp)})
	case comp == report.ComponentEtcd:
		quorum, conds := etcdQuorum(names, snap, now, cfg)
		cs.Conditions = append(cs.Conditions, conds...)
		cs.Overall, cs.Reason = quorum, conds[0].Reason
		if worstOtherEtcdCheck(names, snap, now, cfg).Rank() >= report.StatusDegraded.Rank() && quorum.Rank() < report.StatusDegraded.Rank() {
			cs.Overall, cs.Reason = report.StatusDegraded, ReasonCheckDegraded
		}
	default:
		cs.Overall, cs.Reason = report.StatusHealthy, ReasonNodesHealthy
		for _, ns := range cs.Nodes {
			cs.Overall = report.Worse(cs.Overall, ns.Status)
		}
		if cs.Overall != report.StatusHealthy {
			cs.Reason = ReasonNodesNotHealthy
		}
	}
	// Conditions are in node order here; Compact sorts what is written.
	return cs
}

// foldChecks folds a node's observations of one component into one
// condition per check.
func foldChecks(node string, obs []report.Observation) []Condition {
	byCheck := map[string][]report.Observation{}
	for _, o := range obs {
		byCheck[o.Check] = append(byCheck[o.Check], o)
	}
	checks := make([]string, 0, len(byCheck))
	for c := range byCheck {
		checks = append(checks, c)
	}
	sort.Strings(checks)
	out := make([]Condition, 0, len(checks))
	for _, check := range checks {
		group := byCheck[check]
		worst := group[0]
		for _, o := range group[1:] {
			if o.Status.Rank() > worst.Status.Rank() {
				worst = o
			}
		}
		// A Healthy condition carries no message: Compact drops True
		// node-level conditions, and the live numbers agents put in healthy
		// messages (latencies, raft indexes) would make every report a
		// change of the rollup.
		msg := ""
		switch {
		case worst.Status == report.StatusHealthy:
		case len(group) > 1 || (worst.ResourceRef != nil && worst.ResourceRef.Kind != report.KindNode):
			msg = foldMessages(group)
		default:
			msg = worst.Message
		}
		out = append(out, Condition{Type: ConditionType(check), Severity: worst.Status, Reason: worst.Reason, Message: truncate(msg), Node: node})
		for _, o := range group {
			if o.Status == report.StatusHealthy || o.ResourceRef == nil || o.ResourceRef.Kind == report.KindNode {
				continue
			}
			ref := *o.ResourceRef
			out = append(out, Condition{Type: ConditionType(check), Severity: o.Status, Reason: o.Reason,
				Message: truncate(fmt.Sprintf("on %s: %s", node, o.Message)), Node: node, Resource: &ref})
		}
	}
	return out
}

// foldMessages names the resources of a group of observations that are not
// Healthy, worst first; the group has at least one.
func foldMessages(group []report.Observation) string {
	bad := make([]report.Observation, 0, len(group))
	for _, o := range group {
		if o.Status != report.StatusHealthy {
			bad = append(bad, o)
		}
	}
	sort.SliceStable(bad, func(i, j int) bool {
		if bad[i].Status.Rank() != bad[j].Status.Rank() {
			return bad[i].Status.Rank() > bad[j].Status.Rank()
		}
		return refName(bad[i]) < refName(bad[j])
	})
	parts := make([]string, 0, len(bad))
	for _, o := range bad {
		parts = append(parts, fmt.Sprintf("%s %s: %s", refName(o), o.Status, o.Reason))
	}
	return fmt.Sprintf("%d of %d not Healthy: %s", len(bad), len(group), strings.Join(parts, "; "))
}

func refName(o report.Observation) string {
	if o.ResourceRef == nil {
		return "-"
	}
	if o.ResourceRef.Namespace != "" {
		return o.ResourceRef.Kind + "/" + o.ResourceRef.Namespace + "/" + o.ResourceRef.Name
	}
	return o.ResourceRef.Kind + "/" + o.ResourceRef.Name
}

// nodeStateOf is the worst of a node's conditions. A Healthy node state
// carries no reason or message: at 5,000 nodes every byte of an entry counts
// twice (the entry and its managedFields).
func nodeStateOf(conds []Condition, lastReport time.Time) NodeState {
	ns := NodeState{Status: report.StatusHealthy, LastReportAt: lastReport}
	var worst *Condition
	for i := range conds {
		c := &conds[i]
		if c.Severity == report.StatusHealthy {
			continue
		}
		if worst == nil || c.Severity.Rank() > worst.Severity.Rank() {
			worst = c
		}
	}
	if worst != nil {
		ns.Status, ns.Reason = worst.Severity, worst.Reason
		ns.Message = truncate(worst.Type + ": " + worst.Message)
	}
	return ns
}

// etcdMember is one node's etcd member as its latest report describes it.
type etcdMember struct {
	node    string
	learner bool
	fresh   bool
	status  report.Status
	reason  string
}

// etcdQuorum judges etcd on the quorum projection. The first condition
// returned is the component-level Quorum condition; one QuorumMember
// condition per voting member follows.
func etcdQuorum(names []string, snap state.Snapshot, now time.Time, cfg Config) (report.Status, []Condition) {
	var members []etcdMember
	voting := -1
	for _, name := range names {
		e := snap[name]
		fresh := !cfg.Stale(e, now)
		for _, o := range e.Observations() {
			if o.Component != report.ComponentEtcd {
				continue
			}
			// The attributes read here are judgedAttributes.
			switch o.Check {
			case report.CheckEtcdMember:
				m := etcdMember{node: name, learner: o.Attributes[report.AttrIsLearner] == 1, fresh: fresh, status: o.Status, reason: o.Reason}
				if !fresh {
					m.status, m.reason = report.StatusUnknown, report.ReasonHeartbeatMissed
				}
				members = append(members, m)
			case report.CheckEtcdMembership:
				if v, ok := o.Attributes[report.AttrVotingMembers]; ok && fresh && int(v) > voting {
					voting = int(v)
				}
			}
		}
	}
	var healthy, counted int
	var notHealthy []string
	var memberConds []Condition
	for _, m := range members {
		if m.learner {
			continue
		}
		counted++
		c := Condition{Type: TypeQuorumMember, Node: m.node, Severity: m.status, Reason: m.reason}
		if m.status == report.StatusHealthy {
			healthy++
			c.Message = "voting member, healthy"
		} else {
			c.Message = fmt.Sprintf("voting member, not counted healthy: %s", m.status)
			notHealthy = append(notHealthy, fmt.Sprintf("%s (%s)", m.node, m.reason))
		}
		memberConds = append(memberConds, c)
	}
	source := "etcd-membership"
	if voting < 0 {
		voting, source = counted, "counted etcd-member observations"
	}
	q := Condition{Type: TypeQuorum}
	switch {
	case voting == 0:
		q.Severity, q.Reason = report.StatusUnknown, ReasonNoVotingMembers
	case healthy >= voting:
		q.Severity, q.Reason = report.StatusHealthy, ReasonQuorumHealthy
	case healthy >= voting/2+1:
		q.Severity, q.Reason = report.StatusDegraded, ReasonQuorumAtRisk
	default:
		q.Severity, q.Reason = report.StatusDown, ReasonQuorumLost
	}
	q.Message = fmt.Sprintf("%d/%d voting members healthy (voting members from %s)", healthy, voting, source)
	if missing := voting - counted; missing > 0 {
		q.Message += fmt.Sprintf("; %d voting member(s) on no reporting node", missing)
	}
	if len(notHealthy) > 0 {
		q.Message += "; not healthy: " + strings.Join(notHealthy, ", ")
	}
	q.Message = truncate(q.Message)
	return q.Severity, append([]Condition{q}, memberConds...)
}

// worstOtherEtcdCheck is the worst etcd observation on fresh nodes other
// than the member and membership checks the projection already judged.
func worstOtherEtcdCheck(names []string, snap state.Snapshot, now time.Time, cfg Config) report.Status {
	worst := report.StatusHealthy
	for _, name := range names {
		e := snap[name]
		if cfg.Stale(e, now) {
			continue
		}
		for _, o := range e.Observations() {
			if o.Component != report.ComponentEtcd || o.Check == report.CheckEtcdMember || o.Check == report.CheckEtcdMembership {
				continue
			}
			if o.Status == report.StatusDegraded || o.Status == report.StatusDown {
				worst = report.Worse(worst, o.Status)
			}
		}
	}
	return worst
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

func truncate(s string) string {
	if len(s) <= MaxMessage {
		return s
	}
	cut := MaxMessage - 3
	for cut > 0 && !utf8Start(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

// sortConditions orders conditions: component-level first, then by type,
// then by node.
func sortConditions(cs []Condition) {
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

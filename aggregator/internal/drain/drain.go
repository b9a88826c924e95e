// Package drain answers "can node X be drained now?" from the aggregator's
// in-memory state. Evaluate is a pure function of (node, Snapshot, now): it
// runs every rule of the Rules table and folds their reasons into one
// verdict.
//
// Verdict precedence (documented contract):
//   - any reason blocked  -> blocked (a certain blocker is always shown,
//     even when another input is unknown; it stays blocked whatever that
//     input turns out to be);
//   - else any reason unknown -> unknown (never safe on missing data);
//   - else safe.
//
// Every rule reports at least one reason, safe ones included, so a caller
// always sees what was looked at. Reasons are ordered blocked, unknown,
// safe, then by rule order, then by resource.
//
// Liveness of the other nodes, shared by every rule: a node that is not a
// Kubernetes Node any more, or is cordoned (spec.unschedulable), is gone
// (certainly not serving after the drain); a node whose agent missed its
// heartbeat is uncertain (it may or may not serve). Quorum projections are
// computed twice, pessimistically (uncertain members count as gone) and
// optimistically (uncertain members count as healthy): safe when even the
// pessimistic projection keeps quorum, blocked when even the optimistic one
// loses it, unknown in between.
//
// Serving is package drainserver's: the Service that keeps a snapshot
// warm and answers each check from it, the HTTP and gRPC front ends, their
// authentication and the disruption budget's loop. This package holds the
// rules, the snapshot they read (Snapshot, Indexer, StateNodes) and the
// budget's computation (EvaluateAll, BudgetSnapshot), and does no I/O.
package drain

import (
	"sort"
	"time"

	"github.com/cozystack/cozy-health/aggregator/internal/quorum"
	"github.com/cozystack/cozy-health/pkg/drainapi"
	"github.com/cozystack/cozy-health/pkg/report"
)

// Verdict is the answer of one rule or of the whole check
// (drainapi.Verdict, the answer's one definition).
type Verdict = drainapi.Verdict

// The three verdicts.
const (
	Safe    = drainapi.Safe
	Blocked = drainapi.Blocked
	Unknown = drainapi.Unknown
)

// rank orders verdicts by precedence: blocked > unknown > safe.
func rank(v Verdict) int {
	switch v {
	case Blocked:
		return 2
	case Unknown:
		return 1
	default:
		return 0
	}
}

// Reason is one rule's finding: drainapi.Reason's fields (see there), and
// the claims the rule did not believe.
type Reason struct {
	Rule        string
	Component   string
	Verdict     Verdict
	Message     string
	ResourceRef *report.ResourceRef
	Attributes  map[string]float64
	// rejected are the claims the rule did not believe (Rejected). Not
	// part of the answer.
	rejected []quorum.Rejection
}

// Rejected are the claims the rule did not believe; the drain check's
// server hands them to its quorum.Auditor. Not part of the answer.
func (r Reason) Rejected() []quorum.Rejection { return r.rejected }

// Result is the verdict on one node and every reason behind it, as
// drainapi.Result (API) says it; Verdict is folded as the package comment
// says.
type Result struct {
	Node        string
	Intent      Intent
	Verdict     Verdict
	Reasons     []Reason
	EvaluatedAt time.Time
	SnapshotAt  time.Time
}

// API is the answer as the HTTP endpoint encodes it.
func (r Result) API() drainapi.Result {
	out := drainapi.Result{Node: r.Node, Intent: r.Intent, Verdict: r.Verdict, EvaluatedAt: r.EvaluatedAt, SnapshotAt: r.SnapshotAt,
		Reasons: make([]drainapi.Reason, len(r.Reasons))}
	for i, x := range r.Reasons {
		out.Reasons[i] = drainapi.Reason{Rule: x.Rule, Component: x.Component, Verdict: x.Verdict, Message: x.Message,
			ResourceRef: x.ResourceRef, Attributes: x.Attributes}
	}
	return out
}

// Rule is one drain rule: a small unit listed in Rules.
type Rule interface {
	// Name is the rule's name, as it appears in reasons.
	Name() string
	// Judge returns the rule's findings for draining node; at least one.
	Judge(node string, s *Snapshot, now time.Time) []Reason
}

// Rules is every drain rule, in the order their reasons are listed.
var Rules = []Rule{
	targetDataRule{},
	etcdQuorumRule{},
	linstorLastReplicaRule{},
	linstorQuorumRule{},
	ovnCentralQuorumRule{},
}

// Evaluate runs every rule of Rules for node against s at now.
func Evaluate(node string, s *Snapshot, now time.Time) Result {
	return EvaluateRules(Rules, node, s, now)
}

// EvaluateIntent runs every rule of rulesFor(intent) for node against s at
// now.
func EvaluateIntent(node string, intent Intent, s *Snapshot, now time.Time) Result {
	res := EvaluateRules(rulesFor(intent), node, s, now)
	res.Intent = intent
	return res
}

// EvaluateRules runs rules for node against s at now and folds their
// reasons into one verdict.
func EvaluateRules(rules []Rule, node string, s *Snapshot, now time.Time) Result {
	res := Result{Node: node, Verdict: Safe, EvaluatedAt: now, SnapshotAt: s.TakenAt}
	for _, r := range rules {
		res.Reasons = append(res.Reasons, r.Judge(node, s, now)...)
	}
	for _, r := range res.Reasons {
		if rank(r.Verdict) > rank(res.Verdict) {
			res.Verdict = r.Verdict
		}
	}
	if len(res.Reasons) == 0 {
		// No rule said anything: never a silent safe.
		res.Verdict = Unknown
		res.Reasons = []Reason{{Rule: "none", Component: report.ComponentNode, Verdict: Unknown, Message: "no drain rule produced a finding"}}
	}
	sort.SliceStable(res.Reasons, func(i, j int) bool {
		return rank(res.Reasons[i].Verdict) > rank(res.Reasons[j].Verdict)
	})
	return res
}

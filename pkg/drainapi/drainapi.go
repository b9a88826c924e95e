// Package drainapi is the drain pre-check's answer as JSON (GET
// /v1/drain-check), defined once: the aggregator encodes it, `kubectl
// health drain-check` and the tests decode it. The rules and the verdict
// precedence are the aggregator's (aggregator/internal/drain).
package drainapi

import (
	"fmt"
	"time"

	"github.com/cozystack/cozy-health/pkg/report"
)

// Path is the drain check's HTTP path; the node is the query parameter
// node.
const Path = "/v1/drain-check"

// Verdict is the answer of one rule or of the whole check.
type Verdict string

// The three verdicts.
const (
	// Safe: draining the node keeps every rule's invariant.
	Safe Verdict = "safe"
	// Blocked: draining the node certainly breaks an invariant.
	Blocked Verdict = "blocked"
	// Unknown: the data needed to decide is missing or stale.
	Unknown Verdict = "unknown"
)

// Intent is why the node is drained: what the rules assume of its return.
type Intent string

// The intents.
const (
	// IntentReboot: the node comes back (a reboot, an upgrade). Its
	// replicas return Outdated and resync, its etcd and OVN members
	// return: the rules check that the cluster keeps its quorums and an
	// up-to-date copy of every resource while it is away.
	IntentReboot Intent = "reboot"
	// IntentDecommission: the node does not come back. Besides what a
	// reboot needs, its etcd and OVN raft members must already be removed
	// and every LINSTOR resource it holds must be re-placeable on other
	// satellites.
	IntentDecommission Intent = "decommission"
)

// ParseIntent parses an intent; empty is IntentReboot.
func ParseIntent(s string) (Intent, error) {
	switch Intent(s) {
	case "", IntentReboot:
		return IntentReboot, nil
	case IntentDecommission:
		return IntentDecommission, nil
	}
	return "", fmt.Errorf("intent %q: want %s or %s", s, IntentReboot, IntentDecommission)
}

// Result is the verdict on one node and every reason behind it.
type Result struct {
	// Node is the node asked about.
	Node string `json:"node"`
	// Intent is the intent the rules were asked for.
	Intent Intent `json:"intent,omitempty"`
	// Verdict is the folded verdict: blocked when any reason is, else
	// unknown when any reason is, else safe.
	Verdict Verdict `json:"verdict"`
	// Reasons are every rule's findings, blocked first.
	Reasons []Reason `json:"reasons"`
	// EvaluatedAt is the now the rules were evaluated at.
	EvaluatedAt time.Time `json:"evaluatedAt"`
	// SnapshotAt is when the state the rules read was taken.
	SnapshotAt time.Time `json:"snapshotAt"`
}

// Reason is one rule's finding.
type Reason struct {
	// Rule is the name of the rule that found it.
	Rule string `json:"rule"`
	// Component is the component it is about (etcd, linstor, kube-ovn, node).
	Component string `json:"component"`
	// Verdict is this finding's verdict.
	Verdict Verdict `json:"verdict"`
	// Message is for people, with the numbers; never parsed.
	Message string `json:"message"`
	// ResourceRef is the resource the finding is about, if any.
	ResourceRef *report.ResourceRef `json:"resourceRef,omitempty"`
	// Attributes are the numbers behind the finding.
	Attributes map[string]float64 `json:"attributes,omitempty"`
}

// Error is the body of every answer that is not 200.
type Error struct {
	Error string `json:"error"`
}

// BudgetPath is the disruption budget's HTTP path (GET, no parameters).
const BudgetPath = "/v1/drain-budget"

// Budget is the disruption budget: every node's reboot verdict as the
// aggregator last computed it (every few seconds, for
// cozy_health_drain_verdict), and for each what losing it next would
// break.
type Budget struct {
	// EvaluatedAt is when the verdicts were computed.
	EvaluatedAt time.Time `json:"evaluatedAt"`
	// Intent is the intent the verdicts are for (reboot).
	Intent Intent `json:"intent"`
	// Nodes are every known node, sorted by name.
	Nodes []BudgetNode `json:"nodes"`
}

// BudgetNode is one node of the budget.
type BudgetNode struct {
	Node    string  `json:"node"`
	Verdict Verdict `json:"verdict"`
	// Breaks are the blocked reasons: the quorums and resources that would
	// lose their majority or last copy if the node were lost next.
	Breaks []Reason `json:"breaks,omitempty"`
	// Undetermined are the unknown reasons: what could not be decided.
	Undetermined []Reason `json:"undetermined,omitempty"`
}

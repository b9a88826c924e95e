package rollup

import (
	"fmt"
	"strings"
	"time"

	"github.com/cozystack/cozy-health/aggregator/internal/status"
	"github.com/cozystack/cozy-health/pkg/report"
)

// The disruption budget on the `node` component (issue 37): one
// component-level condition saying how many nodes could be drained now,
// from the drain budget's last evaluation (every node's reboot verdict,
// computed every few seconds by package drain). The rollup does not judge
// drains: it takes the evaluation as facts (BudgetFacts, Engine.SetBudget)
// and words it, so Compute stays a pure function of the state.
const (
	// TypeDisruptionBudget is the condition's type.
	TypeDisruptionBudget = "DisruptionBudget"
	// ReasonNodesDrainable: at least one node is safe to drain (True).
	ReasonNodesDrainable = "NodesDrainable"
	// ReasonNoNodeDrainable: no node is safe and some are blocked (False):
	// the cluster is one failure from an outage.
	ReasonNoNodeDrainable = "NoNodeDrainable"
	// ReasonDrainUndetermined: no node is safe, none is blocked: every
	// verdict is unknown (Unknown).
	ReasonDrainUndetermined = "DrainUndetermined"
	// ReasonBudgetNotEvaluated: no current evaluation (none yet, or the
	// last is past its FreshUntil) (Unknown).
	ReasonBudgetNotEvaluated = "BudgetNotEvaluated"
	// maxBudgetListed bounds the nodes a message names per verdict.
	maxBudgetListed = 10
)

// BudgetFacts are one evaluation of the drain budget.
type BudgetFacts struct {
	// Gen changes whenever a node's verdict does (the engine recomputes
	// only then, or when the facts go stale).
	Gen uint64
	// At is when the verdicts were computed; past FreshUntil they are not
	// current.
	At, FreshUntil time.Time
	// Safe, Blocked and Unknown are the nodes of each verdict, sorted.
	Safe, Blocked, Unknown []string
}

// gen is bf's Gen; 0 for none.
func (bf *BudgetFacts) gen() uint64 {
	if bf == nil {
		return 0
	}
	return bf.Gen
}

// Fresh tells whether bf is a current evaluation at now.
func (bf *BudgetFacts) Fresh(now time.Time) bool {
	return bf != nil && !bf.At.IsZero() && !now.After(bf.FreshUntil)
}

func listNodes(nodes []string) string {
	if len(nodes) > maxBudgetListed {
		return strings.Join(nodes[:maxBudgetListed], ", ") + fmt.Sprintf(" and %d more", len(nodes)-maxBudgetListed)
	}
	return strings.Join(nodes, ", ")
}

// BudgetCondition words bf at now as the DisruptionBudget condition.
func BudgetCondition(bf *BudgetFacts, now time.Time) status.Condition {
	c := status.Condition{Type: TypeDisruptionBudget}
	if !bf.Fresh(now) {
		c.Severity, c.Reason = report.StatusUnknown, ReasonBudgetNotEvaluated
		c.Message = "the drain verdicts have not been evaluated yet"
		if bf != nil && !bf.At.IsZero() {
			c.Message = fmt.Sprintf("the drain verdicts were last evaluated at %s", bf.At.UTC().Format(time.RFC3339))
		}
		return c
	}
	total := len(bf.Safe) + len(bf.Blocked) + len(bf.Unknown)
	var rest []string
	if len(bf.Blocked) > 0 {
		rest = append(rest, fmt.Sprintf("blocked: %s", listNodes(bf.Blocked)))
	}
	if len(bf.Unknown) > 0 {
		rest = append(rest, fmt.Sprintf("unknown: %s", listNodes(bf.Unknown)))
	}
	tail := ""
	if len(rest) > 0 {
		tail = "; " + strings.Join(rest, "; ")
	}
	switch {
	case len(bf.Safe) > 0:
		c.Severity, c.Reason = report.StatusHealthy, ReasonNodesDrainable
		c.Message = fmt.Sprintf("%d of %d node(s) can be drained now (reboot): %s%s", len(bf.Safe), total, listNodes(bf.Safe), tail)
	case len(bf.Blocked) > 0:
		c.Severity, c.Reason = report.StatusDegraded, ReasonNoNodeDrainable
		c.Message = fmt.Sprintf("no node of %d can be drained now (reboot): the cluster is one failure from an outage (kubectl health budget says what each would break)%s", total, tail)
	default:
		c.Severity, c.Reason = report.StatusUnknown, ReasonDrainUndetermined
		c.Message = fmt.Sprintf("no node's drain verdict is known (%d node(s))%s", total, tail)
		if total == 0 {
			c.Message = "no node is known"
		}
	}
	return c
}

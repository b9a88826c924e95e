package app

import (
	"sort"
	"time"

	"github.com/cozystack/cozy-health/aggregator/internal/drain"
	"github.com/cozystack/cozy-health/aggregator/internal/drainserver"
	"github.com/cozystack/cozy-health/aggregator/internal/rollup"
)

// budgetStaleAfter is how many budget periods an evaluation stays current
// for the DisruptionBudget condition: past it (the budget loop stalled)
// the condition reads Unknown, never the last answer.
const budgetStaleAfter = 6

// budgetFacts returns the drain budget's last evaluation as the rollup's
// facts (rollup.Engine.SetBudget), current for budgetStaleAfter periods.
func budgetFacts(b *drainserver.Budget, period time.Duration) func() *rollup.BudgetFacts {
	return func() *rollup.BudgetFacts {
		snap := b.Latest()
		if snap == nil {
			return nil
		}
		return budgetFactsOf(snap, period)
	}
}

func budgetFactsOf(snap *drain.BudgetSnapshot, period time.Duration) *rollup.BudgetFacts {
	// The loop waits longer where an evaluation is slow (drain.NextBudgetWait).
	bf := &rollup.BudgetFacts{Gen: snap.Gen, At: snap.At, FreshUntil: snap.At.Add(budgetStaleAfter * max(period, snap.Period))}
	for node, r := range snap.Results {
		switch r.Verdict {
		case drain.Safe:
			bf.Safe = append(bf.Safe, node)
		case drain.Blocked:
			bf.Blocked = append(bf.Blocked, node)
		default:
			bf.Unknown = append(bf.Unknown, node)
		}
	}
	sort.Strings(bf.Safe)
	sort.Strings(bf.Blocked)
	sort.Strings(bf.Unknown)
	return bf
}

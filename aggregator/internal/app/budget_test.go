package app

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/cozystack/cozy-health/aggregator/internal/drain"
)

// TestBudgetFactsOf: the budget's evaluation becomes the rollup's facts
// with every node under its verdict, sorted, current for budgetStaleAfter
// of the loop's actual waits: a loop stretched by slow evaluations
// (drain.NextBudgetWait) does not read as stalled.
func TestBudgetFactsOf(t *testing.T) {
	at := time.Date(2026, 12, 6, 6, 0, 0, 0, time.UTC)
	snap := &drain.BudgetSnapshot{Gen: 7, At: at, Results: map[string]drain.Result{
		"n3": {Node: "n3", Verdict: drain.Safe}, "n1": {Node: "n1", Verdict: drain.Safe},
		"n2": {Node: "n2", Verdict: drain.Blocked}, "n4": {Node: "n4", Verdict: drain.Unknown},
	}}
	bf := budgetFactsOf(snap, 5*time.Second)
	assert.Equal(t, uint64(7), bf.Gen)
	assert.Equal(t, []string{"n1", "n3"}, bf.Safe)
	assert.Equal(t, []string{"n2"}, bf.Blocked)
	assert.Equal(t, []string{"n4"}, bf.Unknown)
	assert.Equal(t, at.Add(budgetStaleAfter*5*time.Second), bf.FreshUntil, "the configured period before the loop reports its wait")

	snap.Period = 30 * time.Second // a 1.5 s evaluation at 5 % of a core
	assert.Equal(t, at.Add(budgetStaleAfter*30*time.Second), budgetFactsOf(snap, 5*time.Second).FreshUntil, "stretched with the loop")
}

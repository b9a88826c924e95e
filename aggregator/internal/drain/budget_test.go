package drain

import (
	"testing"
	"time"
)

// TestNextBudgetWait: the budget loop never takes more than
// maxBudgetDutyCycle of a core: a slow evaluation stretches the wait, a
// fast one keeps the period.
func TestNextBudgetWait(t *testing.T) {
	for _, tc := range []struct{ period, took, want time.Duration }{
		{5 * time.Second, 10 * time.Millisecond, 5 * time.Second},
		{5 * time.Second, 250 * time.Millisecond, 5 * time.Second},
		{5 * time.Second, 1500 * time.Millisecond, 30 * time.Second},
		{5 * time.Second, 2 * time.Second, 40 * time.Second},
	} {
		got := NextBudgetWait(tc.period, tc.took)
		if got != tc.want {
			t.Errorf("NextBudgetWait(%s, %s) = %s, want %s", tc.period, tc.took, got, tc.want)
		}
		if duty := float64(tc.took) / float64(got+tc.took); duty > maxBudgetDutyCycle {
			t.Errorf("took %s, wait %s: duty %.3f over %.2f", tc.took, got, duty, maxBudgetDutyCycle)
		}
	}
}

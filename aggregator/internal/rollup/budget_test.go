package rollup

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/cozystack/cozy-health/aggregator/internal/metrics"
	"github.com/cozystack/cozy-health/aggregator/internal/state"
	"github.com/cozystack/cozy-health/aggregator/internal/status"
	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/pkg/report/reporttest"
)

// What the DisruptionBudget condition must say, from what it is for: the
// operator reads whether the cluster can lose a node now. Some node safe:
// True (NodesDrainable, how many); none safe and some blocked: the
// cluster is one failure from an outage, False (NoNodeDrainable); none
// safe, none blocked (all unknown): Unknown; no current evaluation:
// Unknown, never the last answer.
func TestBudgetCondition(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	at := func(safe, blocked, unknown []string) *BudgetFacts {
		return &BudgetFacts{Gen: 1, At: t0, FreshUntil: t0.Add(30 * time.Second), Safe: safe, Blocked: blocked, Unknown: unknown}
	}
	cases := []struct {
		name   string
		bf     *BudgetFacts
		now    time.Time
		status metav1.ConditionStatus
		reason string
		msg    string
	}{
		{name: "all safe", bf: at([]string{"node-1", "node-2", "node-3"}, nil, nil), now: t0,
			status: metav1.ConditionTrue, reason: ReasonNodesDrainable, msg: "3 of 3 node(s) can be drained now (reboot): node-1, node-2, node-3"},
		{name: "one safe, two blocked: still drainable", bf: at([]string{"node-1"}, []string{"node-2", "node-3"}, nil), now: t0,
			status: metav1.ConditionTrue, reason: ReasonNodesDrainable, msg: "1 of 3 node(s) can be drained now (reboot): node-1; blocked: node-2, node-3"},
		{name: "none safe, some blocked, some unknown: one failure from an outage", bf: at(nil, []string{"node-2", "node-3"}, []string{"node-1"}), now: t0,
			status: metav1.ConditionFalse, reason: ReasonNoNodeDrainable,
			msg: "no node of 3 can be drained now (reboot): the cluster is one failure from an outage (kubectl health budget says what each would break); blocked: node-2, node-3; unknown: node-1"},
		{name: "all unknown: not known", bf: at(nil, nil, []string{"node-1", "node-2"}), now: t0,
			status: metav1.ConditionUnknown, reason: ReasonDrainUndetermined, msg: "no node's drain verdict is known (2 node(s)); unknown: node-1, node-2"},
		{name: "no node", bf: at(nil, nil, nil), now: t0, status: metav1.ConditionUnknown, reason: ReasonDrainUndetermined, msg: "no node is known"},
		{name: "not evaluated yet", bf: nil, now: t0, status: metav1.ConditionUnknown, reason: ReasonBudgetNotEvaluated},
		{name: "stale: never the last answer", bf: at([]string{"node-1"}, nil, nil), now: t0.Add(31 * time.Second),
			status: metav1.ConditionUnknown, reason: ReasonBudgetNotEvaluated, msg: "the drain verdicts were last evaluated at 2026-11-30T12:00:00Z"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := BudgetCondition(tc.bf, tc.now)
			assert.Equal(t, TypeDisruptionBudget, c.Type)
			assert.Equal(t, tc.status, c.ConditionStatus())
			assert.Equal(t, tc.reason, c.Reason)
			if tc.msg != "" {
				assert.Equal(t, tc.msg, c.Message)
			}
		})
	}
	many := make([]string, 12)
	for i := range many {
		many[i] = string(rune('a' + i))
	}
	assert.Contains(t, BudgetCondition(at(many, nil, nil), t0).Message, "j and 2 more")
}

func budgetOf(cs *status.Component) *status.Condition {
	for i := range cs.Conditions {
		if cs.Conditions[i].Type == TypeDisruptionBudget {
			return &cs.Conditions[i]
		}
	}
	return nil
}

// TestEngineAddsTheDisruptionBudget: the engine words the budget's facts
// on the node component, recomputes when they change (a new Gen, or going
// stale) even while the state does not, and adds nothing without them.
func TestEngineAddsTheDisruptionBudget(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	m, err := metrics.New(prometheus.NewRegistry())
	require.NoError(t, err)
	st := state.New(m)
	eng := NewEngine(st, Config{DefaultInterval: 5 * time.Second, FreshForMultiple: 6}, Holds{}, 0, testNS, m, m, clk, zap.NewNop())
	var bf *BudgetFacts
	eng.SetBudget(func() *BudgetFacts { return bf })
	reports := func(seq uint64) {
		st.Accept(reporttest.Disk("a", seq, clk.Now(), report.StatusHealthy), clk.Now())
		st.Accept(reporttest.Disk("b", seq, clk.Now(), report.StatusHealthy), clk.Now())
	}

	reports(1)
	out := eng.Evaluate()
	c := budgetOf(out[report.ComponentNode])
	require.NotNil(t, c)
	assert.Equal(t, ReasonBudgetNotEvaluated, c.Reason)
	assert.Nil(t, budgetOf(out[report.ComponentDisk]), "only on the node component")

	evaluated := func(gen uint64, safe, blocked []string) {
		bf = &BudgetFacts{Gen: gen, At: clk.Now(), FreshUntil: clk.Now().Add(30 * time.Second), Safe: safe, Blocked: blocked}
	}
	evaluated(1, []string{"a", "b"}, nil)
	clk.Step(5 * time.Second)
	reports(2)
	out = eng.Evaluate()
	assert.Equal(t, ReasonNodesDrainable, budgetOf(out[report.ComponentNode]).Reason)

	// The same facts again (a re-evaluation with no verdict change keeps
	// its Gen): retimed, the condition kept.
	clk.Step(5 * time.Second)
	reports(3)
	out = eng.Evaluate()
	assert.Equal(t, ReasonNodesDrainable, budgetOf(out[report.ComponentNode]).Reason)

	// Every node blocked: recomputed although the state judges the same.
	evaluated(2, nil, []string{"a", "b"})
	clk.Step(5 * time.Second)
	reports(4)
	out = eng.Evaluate()
	c = budgetOf(out[report.ComponentNode])
	assert.Equal(t, ReasonNoNodeDrainable, c.Reason)
	assert.Equal(t, metav1.ConditionFalse, c.ConditionStatus())
	assert.Equal(t, report.StatusHealthy, out[report.ComponentNode].Overall, "the budget says how far from an outage, it does not make the nodes less healthy")

	// The budget loop stalls: past FreshUntil the condition is Unknown.
	clk.Step(31 * time.Second)
	reports(5)
	out = eng.Evaluate()
	assert.Equal(t, ReasonBudgetNotEvaluated, budgetOf(out[report.ComponentNode]).Reason)

	// Without SetBudget, no condition.
	plain := NewEngine(st, Config{DefaultInterval: 5 * time.Second, FreshForMultiple: 6}, Holds{}, 0, testNS, m, nil, clk, zap.NewNop())
	assert.Nil(t, budgetOf(plain.Evaluate()[report.ComponentNode]))
}

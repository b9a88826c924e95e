package drain

import (
	"encoding/json"
	"sort"
	"sync"
	"time"

	"github.com/cozystack/cozy-health/pkg/drainapi"
)

// Nodes lists the nodes a snapshot knows (Known), sorted.
func (s *Snapshot) Nodes() []string {
	out := make([]string, 0, len(s.nodes))
	for name := range s.nodes {
		if s.Known(name) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// EvaluateAll is the disruption budget's computation: the reboot verdict
// (EvaluateIntent with IntentReboot) of every node s knows (Nodes) at now,
// by node.
func EvaluateAll(s *Snapshot, now time.Time) map[string]Result {
	out := make(map[string]Result, s.Len())
	s = s.forEvaluation(now)
	for _, node := range s.Nodes() {
		out[node] = EvaluateIntent(node, IntentReboot, s, now)
	}
	return out
}

// BudgetSnapshot is one evaluation of the disruption budget (EvaluateAll;
// drainserver.Budget runs it, exports it and serves it). Immutable.
type BudgetSnapshot struct {
	// Gen changes whenever some node's verdict changed (or a node came or
	// went) since the previous evaluation.
	Gen uint64
	// At is when the verdicts were computed.
	At time.Time
	// Took is how long the evaluation took, and Period the wait until the
	// next one (drainserver.Budget.Run's period, stretched by
	// NextBudgetWait).
	Took, Period time.Duration
	// Results are every known node's reboot verdict, by node; the budget
	// keeps each one's blocked and unknown reasons only (API reads no
	// other).
	Results map[string]Result

	// encoded is API() as JSON, encoded once for every request that reads
	// this evaluation (megabytes at thousands of nodes).
	encodeOnce sync.Once
	encoded    []byte
	encodeErr  error
}

// JSON is API() encoded, once per evaluation.
func (b *BudgetSnapshot) JSON() ([]byte, error) {
	b.encodeOnce.Do(func() { b.encoded, b.encodeErr = json.Marshal(b.API()) })
	return b.encoded, b.encodeErr
}

// Count is how many nodes have each verdict.
func (b *BudgetSnapshot) Count() (safe, blocked, unknown int) {
	for _, r := range b.Results {
		switch r.Verdict {
		case Safe:
			safe++
		case Blocked:
			blocked++
		default:
			unknown++
		}
	}
	return safe, blocked, unknown
}

// API is the budget as GET /v1/drain-budget encodes it.
func (b *BudgetSnapshot) API() drainapi.Budget {
	out := drainapi.Budget{EvaluatedAt: b.At, Intent: IntentReboot, Nodes: make([]drainapi.BudgetNode, 0, len(b.Results))}
	for _, r := range b.Results {
		api := r.API()
		n := drainapi.BudgetNode{Node: r.Node, Verdict: r.Verdict}
		for _, x := range api.Reasons {
			switch x.Verdict {
			case Blocked:
				n.Breaks = append(n.Breaks, x)
			case Unknown:
				n.Undetermined = append(n.Undetermined, x)
			}
		}
		out.Nodes = append(out.Nodes, n)
	}
	sort.Slice(out.Nodes, func(i, j int) bool { return out.Nodes[i].Node < out.Nodes[j].Node })
	return out
}

// maxBudgetDutyCycle bounds the share of one core the budget loop takes:
// an evaluation costs more with more nodes and resources, so the wait
// after one is at least its duration over this share (one of 1.5 s waits
// 30 s; BenchmarkEvaluateAll5000Nodes measures it), and never shorter
// than the loop's period (drainserver.Budget.Run).
const maxBudgetDutyCycle = 0.05

// NextBudgetWait is the wait after an evaluation that took took, with
// period the shortest.
func NextBudgetWait(period, took time.Duration) time.Duration {
	return max(period, time.Duration(float64(took)/maxBudgetDutyCycle))
}

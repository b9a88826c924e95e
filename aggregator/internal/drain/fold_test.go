package drain

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/pkg/wire"
)

// TestFoldedReportIsNeverSafeToDrain: an agent folds the DRBD resources
// that do not fit its report budget into a summary (wire.Fit). Whether
// the node holds the last UpToDate replica of one of those is not known
// to the aggregator, so drain-check must not answer safe: the summary
// reads Unknown, and the LINSTOR rules read "which resources it holds is
// unknown".
func TestFoldedReportIsNeverSafeToDrain(t *testing.T) {
	H := report.StatusHealthy
	var obs1, obs2 []report.Observation
	for i := range 400 {
		res := fmt.Sprintf("pvc-%04d", i)
		// node-1 holds the only UpToDate replica of pvc-0399, which
		// node-2 does not hold at all.
		if i == 399 {
			obs1 = append(obs1, drbd(res, H, true, false, 1, 1))
			continue
		}
		obs1 = append(obs1, drbd(res, H, true, false, 2, 2))
		obs2 = append(obs2, drbd(res, H, true, false, 2, 2))
	}
	whole := map[string]NodeInfo{"node-1": fresh("node-1", obs1...), "node-2": fresh("node-2", obs2...)}
	lr := reasonsOf(Evaluate("node-1", snap(whole), t0), RuleLinstorLastReplica)
	require.NotEmpty(t, lr)
	assert.Equal(t, Blocked, lr[0].Verdict, "the whole report shows the last replica")

	folded, res := wire.Fit(whole["node-1"].LastReport, 8<<10)
	require.Positive(t, res.Folded)
	n1 := fresh("node-1")
	n1.LastReport = folded
	lr = reasonsOf(Evaluate("node-1", snap(map[string]NodeInfo{"node-1": n1, "node-2": whole["node-2"]}), t0), RuleLinstorLastReplica)
	require.NotEmpty(t, lr)
	assert.NotEqual(t, Safe, lr[0].Verdict, lr[0].Message)
	assert.Contains(t, lr[0].Message, "unknown")
}

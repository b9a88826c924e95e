package drain

import (
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/pkg/linstorapi"
	"github.com/cozystack/cozy-health/pkg/report"
)

// mixedCluster is n nodes in every liveness the rules tell apart (fresh,
// stale, cordoned, deleted, silent, fresh at t0 but stale a little later)
// holding random replicas of resources in every state a holder reports
// (UpToDate or not, diskless, Healthy/Degraded/Down/Unknown, LINSTOR's
// counts agreeing or not), and an etcd cluster on the first nodes.
func mixedCluster(rng *rand.Rand, n int) map[string]NodeInfo {
	names := make([]string, n)
	obs := make([][]report.Observation, n)
	for i := range names {
		names[i] = fmt.Sprintf("node-%d", i+1)
		if i < 3 {
			st := []report.Status{report.StatusHealthy, report.StatusHealthy, report.StatusHealthy, report.StatusHealthy, report.StatusDown, report.StatusUnknown}[rng.Intn(6)]
			obs[i] = append(obs[i], etcdMember(st, false), membership(3, 0))
		}
	}
	statuses := []report.Status{report.StatusHealthy, report.StatusHealthy, report.StatusHealthy, report.StatusHealthy, report.StatusHealthy,
		report.StatusHealthy, report.StatusHealthy, report.StatusDegraded, report.StatusDown, report.StatusUnknown}
	for r := range n {
		res := fmt.Sprintf("pvc-%03d", r)
		holders := 1 + rng.Intn(3)
		replicas := holders
		if rng.Intn(4) == 0 {
			replicas++
		}
		upToDate := replicas - rng.Intn(2)
		for _, h := range rng.Perm(n)[:holders] {
			diskless := rng.Intn(4) == 0
			obs[h] = append(obs[h], drbd(res, statuses[rng.Intn(len(statuses))], !diskless && rng.Intn(6) > 0, diskless, replicas, upToDate))
			if rng.Intn(20) == 0 {
				// A node listing the resource twice, the second time
				// otherwise (a lying or broken agent).
				obs[h] = append(obs[h], drbd(res, statuses[rng.Intn(len(statuses))], rng.Intn(2) == 0, false, replicas, upToDate))
			}
		}
	}
	nodes := make(map[string]NodeInfo, n)
	for i, name := range names {
		var ni NodeInfo
		switch rng.Intn(16) {
		case 0:
			ni = stale(name, obs[i]...)
		case 1:
			ni = cordoned(name, obs[i]...)
		case 2:
			ni = deleted(name, obs[i]...)
		case 3:
			ni = silent(name)
		default:
			ni = fresh(name, obs[i]...)
			// Some fresh nodes' grace runs out between t0 and the later now.
			ni.FreshUntil = t0.Add(time.Duration(rng.Intn(20)) * time.Second)
		}
		if i >= 3 && rng.Intn(2) == 0 {
			ni = asWorker(ni)
		}
		nodes[name] = ni
	}
	return nodes
}

// TestEvaluateAllIsEvaluate: the budget's evaluation of every node
// (EvaluateAll, which reads the raft views, replicas and liveness once per
// evaluation) answers for each node exactly what drain-check's evaluation
// of that node alone answers, reasons, attributes and rejected claims
// included, at the snapshot's time and later (nodes going stale), from
// the agents' reports and from the LINSTOR controller's view.
func TestEvaluateAllIsEvaluate(t *testing.T) {
	rng := rand.New(rand.NewSource(40))
	verdicts := map[Verdict]int{}
	for round := range 60 {
		nodes := mixedCluster(rng, 8+rng.Intn(25))
		s := snap(nodes)
		if round%3 == 2 {
			var reps []linstorapi.Replica
			for _, name := range s.Nodes() {
				for _, d := range s.resources(name) {
					reps = append(reps, linstorapi.Replica{Resource: d.resource, Node: name, State: "UpToDate", Diskless: d.rep.diskless})
				}
			}
			s = s.WithControllerView(reps, "")
		}
		for _, now := range []time.Time{t0, t0.Add(10 * time.Second), t0.Add(time.Hour)} {
			all := EvaluateAll(s, now)
			require.Len(t, all, len(s.Nodes()))
			for _, node := range s.Nodes() {
				one := EvaluateIntent(node, IntentReboot, s, now)
				require.Equal(t, one, all[node], "round %d, %s at %s", round, node, now.Sub(t0))
				verdicts[one.Verdict]++
			}
		}
	}
	t.Logf("verdicts compared: %v", verdicts)
	for _, v := range []Verdict{Safe, Blocked, Unknown} {
		require.Positive(t, verdicts[v], "the clusters give no %s verdict: the comparison would not cover it", v)
	}
}

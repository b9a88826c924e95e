package drain

import (
	"time"

	"github.com/cozystack/cozy-health/aggregator/internal/state"
)

// StateNodes is the drain pre-check's view of st at now: every node that
// is a Kubernetes Node (kube, name -> Node facts) or is in the state, with
// its latest report and whether it is within its heartbeat grace (grace
// maps a node's report interval to its grace, e.g. rollup.Config.Grace).
// The reports are shared, not copied: they are immutable. A Source is this
// with st, kube and grace bound.
func StateNodes(st *state.State, now time.Time, kube map[string]KubeNode, grace func(interval time.Duration) time.Duration) map[string]NodeInfo {
	var out map[string]NodeInfo
	st.Read(func(nodes map[string]state.Entry) {
		out = make(map[string]NodeInfo, max(len(nodes), len(kube)))
		for name, e := range nodes {
			if e.Report == nil {
				// Expected, never heard: not fresh, nothing to judge.
				out[name] = NodeInfo{Role: e.Role}
				continue
			}
			until := e.ReceivedAt.Add(grace(e.Report.Interval))
			out[name] = NodeInfo{LastReport: e.Report, LastHeard: e.ReceivedAt, Fresh: !now.After(until), FreshUntil: until, Role: e.Role}
		}
	})
	for name, k := range kube {
		n := out[name]
		n.Exists, n.Cordoned, n.Role = true, k.Cordoned, k.Role
		out[name] = n
	}
	return out
}

package state

import (
	"time"

	"github.com/cozystack/cozy-health/aggregator/internal/drain"
)

// DrainNodes is the drain pre-check's view of the state at now: every node
// that is a Kubernetes Node (kube, name -> Node facts) or has an accepted
// report, with its latest report and whether it is within its heartbeat
// grace (grace maps a node's report interval to its grace, e.g.
// rollup.Config.Grace). The reports are shared, not copied: they are
// immutable.
func (s *State) DrainNodes(now time.Time, kube map[string]drain.KubeNode, grace func(interval time.Duration) time.Duration) map[string]drain.NodeInfo {
	s.mu.RLock()
	out := make(map[string]drain.NodeInfo, max(len(s.nodes), len(kube)))
	for name, e := range s.nodes {
		if e.Report == nil {
			// Expected, never heard: not fresh, nothing to judge.
			out[name] = drain.NodeInfo{}
			continue
		}
		until := e.ReceivedAt.Add(grace(e.Report.Interval))
		out[name] = drain.NodeInfo{LastReport: e.Report, LastHeard: e.ReceivedAt, Fresh: !now.After(until), FreshUntil: until}
	}
	s.mu.RUnlock()
	for name, k := range kube {
		n := out[name]
		n.Exists, n.Cordoned = true, k.Cordoned
		out[name] = n
	}
	return out
}

package rollup

import (
	"fmt"
	"sort"
	"time"

	"github.com/cozystack/cozy-health/aggregator/internal/status"
	"github.com/cozystack/cozy-health/pkg/report"
)

// ClusterFacts are facts about a node-local component that the aggregator
// reads centrally rather than from the agents (the LINSTOR controller's
// view of every satellite and replica): per-node observations in the shape
// agents report, with the freshness of the central read.
type ClusterFacts struct {
	// Component is the node-local component they belong to.
	Component string
	// Type is the component-level condition that says whether the central
	// read is current (LinstorController).
	Type string
	// Gen changes whenever the facts do (the engine's retiming compares it).
	Gen uint64
	// ObservedAt is when the source last answered; FreshUntil is when
	// that answer stops being current (past it the facts are Unknown: the
	// source's grace, as a node's heartbeat grace). The Health object's
	// freshUntil is Config's bound from ObservedAt, as for the agents'
	// facts, so that it outlives a leader failover.
	ObservedAt, FreshUntil time.Time
	// Reason and Message, when Reason is set, say why there is no current
	// answer (never read, reads failing): the condition is Unknown and
	// Nodes is not read.
	Reason, Message string
	// Nodes are the observations per node.
	Nodes map[string][]Observation
}

// Observation is report.Observation (ClusterFacts carry the agents' shape).
type Observation = report.Observation

// Fresh tells whether the facts are current at now.
func (cf *ClusterFacts) Fresh(now time.Time) bool {
	return cf != nil && cf.Reason == "" && !cf.ObservedAt.IsZero() && !now.After(cf.FreshUntil)
}

// ReasonCentralRead is the reason of a current central read's condition.
const ReasonCentralRead = "ViewRead"

// ReasonCentralStale is the reason of central facts past FreshUntil.
const ReasonCentralStale = "ViewStale"

// MergeCluster merges cf into cs, the rollup of cf.Component from the
// agents' reports, before damping and compaction:
//
//   - current facts fold per node exactly as a report's observations do
//     (one condition per check and node, one per resource not Healthy), and
//     each node's state is the worst of its agent's and the central facts
//     (worst wins within a node);
//   - facts that are not current add an Unknown condition of cf.Type and
//     keep the component from reading Healthy: stale is Unknown, never
//     the last answer;
//   - the component is then judged by the node projection again, and is
//     as fresh as its stalest source (observedAt the earlier of the
//     agents' and the central read's, freshUntil cfg's bound from it).
//
// A component no agent observes (NoData) but the central read does is
// judged on the central read alone. nil cf changes nothing.
func MergeCluster(cs *status.Component, cf *ClusterFacts, now time.Time, cfg Config) {
	if cs == nil || cf == nil {
		return
	}
	noAgents := cs.Reason == report.ReasonNoData
	fresh := cf.Fresh(now)
	if noAgents {
		kept := cs.Conditions[:0]
		for _, c := range cs.Conditions {
			if c.Type != TypeData {
				kept = append(kept, c)
			}
		}
		cs.Conditions = kept
	}
	src := status.Condition{Type: cf.Type, Severity: report.StatusHealthy, Reason: ReasonCentralRead, Message: status.Truncate(cf.Message)}
	if !fresh {
		src.Severity, src.Reason = report.StatusUnknown, cf.Reason
		if src.Reason == "" {
			src.Reason = ReasonCentralStale
			src.Message = fmt.Sprintf("facts as last read at %s, current until %s", cf.ObservedAt.UTC().Format(time.RFC3339), cf.FreshUntil.UTC().Format(time.RFC3339))
		}
	}
	if fresh {
		names := make([]string, 0, len(cf.Nodes))
		for n := range cf.Nodes {
			names = append(names, n)
		}
		sort.Strings(names)
		if cs.Nodes == nil {
			cs.Nodes = make(map[string]status.NodeState, len(names))
		}
		type key struct{ typ, node, ref string }
		have := make(map[key]int, len(cs.Conditions))
		for i, c := range cs.Conditions {
			have[key{c.Type, c.Node, c.ResourceKey()}] = i
		}
		for _, n := range names {
			conds := foldChecks(n, cf.Nodes[n])
			for _, c := range conds {
				// The agent reported the same check (drbdsetup's local
				// view): one condition per key, the worse one.
				if i, ok := have[key{c.Type, c.Node, c.ResourceKey()}]; ok {
					if c.Severity.Rank() > cs.Conditions[i].Severity.Rank() {
						cs.Conditions[i] = c
					}
					continue
				}
				cs.Conditions = append(cs.Conditions, c)
			}
			ns := nodeStateOf(conds, time.Time{})
			if old, ok := cs.Nodes[n]; !ok || ns.Status.Rank() > old.Status.Rank() {
				cs.Nodes[n] = ns
			}
		}
	}
	cs.Conditions = append(cs.Conditions, src)
	switch {
	case len(cs.Nodes) > 0:
		cs.Overall, cs.Reason = nodesProjection(cs.Nodes)
	case fresh:
		cs.Overall, cs.Reason = report.StatusHealthy, ReasonNodesHealthy
	default:
		cs.Overall, cs.Reason = report.StatusUnknown, src.Reason
	}
	if !fresh && cs.Overall == report.StatusHealthy {
		cs.Overall, cs.Reason = report.StatusUnknown, src.Reason
	}
	if fresh {
		ClampCluster(cs, cf, noAgents, cfg)
	}
}

// ClampCluster makes cs as fresh as its stalest source: observedAt no
// later than the central read's (the central read's alone when no agent
// observes the component), freshUntil cfg's bound from it.
func ClampCluster(cs *status.Component, cf *ClusterFacts, only bool, cfg Config) {
	if only || cf.ObservedAt.Before(cs.ObservedAt) {
		cs.ObservedAt = cf.ObservedAt
		cs.FreshUntil = cfg.freshUntil(cf.ObservedAt)
	}
}

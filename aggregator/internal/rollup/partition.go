package rollup

import (
	"fmt"
	"sort"
	"strings"

	"github.com/cozystack/cozy-health/aggregator/internal/state"
	"github.com/cozystack/cozy-health/aggregator/internal/status"
	"github.com/cozystack/cozy-health/pkg/report"
)

// A partial partition (issue 36): this replica does not hear some nodes
// that a peer replica does, and holds their reports as the peer relayed
// them, verified again here with the agents' signatures (package peers).
// Their entries stay what the nodes said; the `node` component records the
// observer's cut path in one component-level condition.
const (
	// TypeObservation is a component-level condition about how the facts
	// were observed, not about the component.
	TypeObservation = "Observation"
	// ReasonReplicaPartitioned: this replica holds some nodes' reports only
	// through a peer replica; the message names this replica, the nodes
	// and the peers.
	ReasonReplicaPartitioned = "ReplicaPartitioned"
	// maxPartitionedListed bounds the nodes one condition's message names
	// per peer; the rest are counted.
	maxPartitionedListed = 20
)

// partitionCondition is the Observation condition of the `node` component
// when some node's entry was relayed by a peer (Entry.Via), nil when every
// node is heard directly. Its severity is Healthy (status True): it is a
// fact about the path between this replica and those nodes, not about the
// nodes, whose entries stay as their signed reports say; it must not add
// to the object's issues nor page for the nodes. The cut is what
// cozy_health_replica_unheard_nodes{replica} alerts on.
func partitionCondition(names []string, snap state.Snapshot, replica string) *status.Condition {
	byPeer := map[string][]string{}
	total := 0
	for _, n := range names {
		if e := snap[n]; e.Report != nil && e.Via != "" {
			byPeer[e.Via] = append(byPeer[e.Via], n)
			total++
		}
	}
	if total == 0 {
		return nil
	}
	peers := make([]string, 0, len(byPeer))
	for p := range byPeer {
		peers = append(peers, p)
	}
	sort.Strings(peers)
	if replica == "" {
		replica = "this replica"
	}
	parts := make([]string, 0, len(peers))
	for _, p := range peers {
		nodes := byPeer[p] // names are sorted
		listed := strings.Join(nodes[:min(len(nodes), maxPartitionedListed)], ", ")
		if len(nodes) > maxPartitionedListed {
			listed += fmt.Sprintf(" and %d more", len(nodes)-maxPartitionedListed)
		}
		parts = append(parts, fmt.Sprintf("%s through %s", listed, p))
	}
	return &status.Condition{Type: TypeObservation, Severity: report.StatusHealthy, Reason: ReasonReplicaPartitioned,
		Message: fmt.Sprintf("replica %s does not hear %d node(s) and holds their signed reports as a peer relayed them: %s",
			replica, total, strings.Join(parts, "; "))}
}

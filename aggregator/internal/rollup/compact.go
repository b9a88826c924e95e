package rollup

import (
	"fmt"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cozystack/cozy-health/aggregator/internal/status"
	"github.com/cozystack/cozy-health/pkg/report"
)

// DefaultMaxListed is the default number of node-level conditions listed
// per object by Compact.
const DefaultMaxListed = 500

// Compact shapes a full status.Component into what is written, keeping a
// Health object far below etcd's request size limit at 5,000 nodes:
//
//   - component-level conditions (Quorum, Data) are kept as they are;
//   - node-level conditions that are True are dropped; the non-True ones
//     are listed, False before Unknown, at most maxListed of them (with the
//     resource-pinned conditions, which are listed but not tallied: their
//     node's folded condition is);
//   - for every node-level condition type one summary condition (no
//     resourceRef) is added: False when any node's is False, else Unknown
//     when any is Unknown, else True, with the counts in its message (and
//     how many non-True ones were not listed);
//   - DegradedNodes is every node whose state is not Healthy, sorted;
//     Issues is the number of written conditions whose status is False.
//
// Compact is pure; cs is modified in place.
func Compact(cs *status.Component, maxListed int) {
	type tally struct {
		worst                    report.Status
		healthy, bad, unknown    int
		listedBad, listedUnknown int
	}
	tallies := map[string]*tally{}
	var kept, nonTrue []status.Condition
	for _, c := range cs.Conditions {
		if c.Node == "" {
			kept = append(kept, c)
			continue
		}
		if c.Resource != nil {
			if c.Severity != report.StatusHealthy {
				nonTrue = append(nonTrue, c)
			}
			continue
		}
		t := tallies[c.Type]
		if t == nil {
			t = &tally{worst: report.StatusHealthy}
			tallies[c.Type] = t
		}
		t.worst = report.Worse(t.worst, c.Severity)
		switch c.Severity {
		case report.StatusHealthy:
			t.healthy++
			continue
		case report.StatusUnknown:
			t.unknown++
		default:
			t.bad++
		}
		nonTrue = append(nonTrue, c)
	}
	// False before Unknown, then worst first, then type and node.
	sort.SliceStable(nonTrue, func(i, j int) bool {
		a, b := nonTrue[i], nonTrue[j]
		if a.Severity.Rank() != b.Severity.Rank() {
			return a.Severity.Rank() > b.Severity.Rank()
		}
		if a.Type != b.Type {
			return a.Type < b.Type
		}
		if a.Node != b.Node {
			return a.Node < b.Node
		}
		return a.ResourceKey() < b.ResourceKey()
	})
	if len(nonTrue) > maxListed {
		nonTrue = nonTrue[:maxListed]
	}
	for _, c := range nonTrue {
		if c.Resource != nil {
			continue
		}
		t := tallies[c.Type]
		if c.Severity == report.StatusUnknown {
			t.listedUnknown++
		} else {
			t.listedBad++
		}
	}
	types := make([]string, 0, len(tallies))
	for ty := range tallies {
		types = append(types, ty)
	}
	sort.Strings(types)
	for _, ty := range types {
		t := tallies[ty]
		s := status.Condition{Type: ty, Severity: t.worst}
		switch s.ConditionStatus() {
		case metav1.ConditionTrue:
			s.Reason = ReasonAllNodesTrue
		case metav1.ConditionFalse:
			s.Reason = ReasonSomeNodesFalse
		default:
			s.Reason = ReasonSomeNodesUnknown
		}
		total := t.healthy + t.bad + t.unknown
		s.Message = fmt.Sprintf("%d nodes: %d True, %d False, %d Unknown", total, t.healthy, t.bad, t.unknown)
		if hidden := t.bad + t.unknown - t.listedBad - t.listedUnknown; hidden > 0 {
			s.Message += fmt.Sprintf("; %d not listed", hidden)
		}
		kept = append(kept, s)
	}
	kept = append(kept, nonTrue...)
	sortConditions(kept)
	cs.Conditions = kept

	cs.DegradedNodes = cs.DegradedNodes[:0]
	for name, ns := range cs.Nodes {
		if ns.Status != report.StatusHealthy {
			cs.DegradedNodes = append(cs.DegradedNodes, name)
		}
	}
	sort.Strings(cs.DegradedNodes)
	cs.Issues = 0
	for _, c := range cs.Conditions {
		if c.ConditionStatus() == metav1.ConditionFalse {
			cs.Issues++
		}
	}
}

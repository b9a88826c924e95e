package rollup

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/cozystack/cozy-health/aggregator/internal/quorum"
	"github.com/cozystack/cozy-health/aggregator/internal/status"
	"github.com/cozystack/cozy-health/pkg/report"
)

// factsOf folds a report's observations per component.
func factsOf(node string, r *report.NodeReport) *reportFacts {
	byComp := map[string][]report.Observation{}
	var obs []report.Observation
	if r != nil {
		obs = r.Observations
	}
	for _, o := range obs {
		byComp[o.Component] = append(byComp[o.Component], o)
	}
	f := &reportFacts{report: r, comps: make(map[string]*componentFacts, len(byComp)+1), claims: quorum.ClaimsOf(r)}
	for _, comp := range report.NodeComponents {
		obs := byComp[comp]
		if len(obs) == 0 && comp != report.ComponentNode {
			continue
		}
		conds := foldChecks(node, obs)
		if comp == report.ComponentNode {
			conds = append(conds, status.Condition{Type: TypeHeartbeat, Severity: report.StatusHealthy, Reason: ReasonReportReceived, Message: "report received", Node: node})
		}
		f.comps[comp] = &componentFacts{conds: conds, state: nodeStateOf(conds, time.Time{})}
		f.present |= 1 << componentIndex[comp]
	}
	return f
}

// foldChecks folds a node's observations of one component into one
// condition per check: type CamelCase(check), pinned to the node, with the
// worst status of the check's observations (one per DRBD resource or block
// device) and a message naming those that are not Healthy. Each of those
// also gets a condition of its own pinned to its resource, so a consumer
// finds the broken resource without parsing a message.
func foldChecks(node string, obs []report.Observation) []status.Condition {
	byCheck := map[string][]report.Observation{}
	for _, o := range obs {
		byCheck[o.Check] = append(byCheck[o.Check], o)
	}
	checks := make([]string, 0, len(byCheck))
	for c := range byCheck {
		checks = append(checks, c)
	}
	sort.Strings(checks)
	out := make([]status.Condition, 0, len(checks))
	for _, check := range checks {
		group := byCheck[check]
		worst := group[0]
		for _, o := range group[1:] {
			if o.Status.Rank() > worst.Status.Rank() {
				worst = o
			}
		}
		// A Healthy condition carries no message: Compact drops True
		// node-level conditions, and the live numbers agents put in healthy
		// messages (latencies, raft indexes) would make every report a
		// change of the rollup.
		msg := ""
		switch {
		case worst.Status == report.StatusHealthy:
		case len(group) > 1 || (worst.ResourceRef != nil && worst.ResourceRef.Kind != report.KindNode):
			msg = foldMessages(group)
		default:
			msg = worst.Message
		}
		out = append(out, status.Condition{Type: ConditionType(check), Severity: worst.Status, Reason: worst.Reason, Message: status.Truncate(msg), Node: node})
		for _, o := range group {
			if o.Status == report.StatusHealthy || o.ResourceRef == nil || o.ResourceRef.Kind == report.KindNode {
				continue
			}
			ref := *o.ResourceRef
			out = append(out, status.Condition{Type: ConditionType(check), Severity: o.Status, Reason: o.Reason,
				Message: status.Truncate(fmt.Sprintf("on %s: %s", node, o.Message)), Node: node, Resource: &ref})
		}
	}
	return out
}

// foldMessages names the resources of a group of observations that are not
// Healthy, worst first; the group has at least one.
func foldMessages(group []report.Observation) string {
	bad := make([]report.Observation, 0, len(group))
	for _, o := range group {
		if o.Status != report.StatusHealthy {
			bad = append(bad, o)
		}
	}
	sort.SliceStable(bad, func(i, j int) bool {
		if bad[i].Status.Rank() != bad[j].Status.Rank() {
			return bad[i].Status.Rank() > bad[j].Status.Rank()
		}
		return refName(bad[i]) < refName(bad[j])
	})
	parts := make([]string, 0, len(bad))
	for _, o := range bad {
		parts = append(parts, fmt.Sprintf("%s %s: %s", refName(o), o.Status, o.Reason))
	}
	return fmt.Sprintf("%d of %d not Healthy: %s", len(bad), len(group), strings.Join(parts, "; "))
}

func refName(o report.Observation) string {
	if o.ResourceRef == nil {
		return "-"
	}
	if o.ResourceRef.Namespace != "" {
		return o.ResourceRef.Kind + "/" + o.ResourceRef.Namespace + "/" + o.ResourceRef.Name
	}
	return o.ResourceRef.Kind + "/" + o.ResourceRef.Name
}

// nodeStateOf is the worst of a node's conditions. A Healthy node state
// carries no reason or message: at 5,000 nodes every byte of an entry counts
// twice (the entry and its managedFields).
func nodeStateOf(conds []status.Condition, lastReport time.Time) status.NodeState {
	ns := status.NodeState{Status: report.StatusHealthy, LastReportAt: lastReport}
	var worst *status.Condition
	for i := range conds {
		c := &conds[i]
		if c.Severity == report.StatusHealthy {
			continue
		}
		if worst == nil || c.Severity.Rank() > worst.Severity.Rank() {
			worst = c
		}
	}
	if worst != nil {
		ns.Status, ns.Reason = worst.Severity, worst.Reason
		ns.Message = status.Truncate(worst.Type + ": " + worst.Message)
	}
	return ns
}

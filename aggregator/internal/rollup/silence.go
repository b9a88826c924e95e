package rollup

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	talosconstants "github.com/siderolabs/talos/pkg/machinery/constants"

	"github.com/cozystack/cozy-health/aggregator/internal/state"
	"github.com/cozystack/cozy-health/aggregator/internal/status"
	"github.com/cozystack/cozy-health/pkg/report"
)

// Silence explained (issue 36). A node whose agent is past its heartbeat
// grace reads Unknown in every component: no evidence either way. What
// Kubernetes publishes about the node says why, and the reason says it:
//
//   - PlannedMaintenance: the Node is cordoned (spec.unschedulable). Every
//     drain cordons first; Talos cordons, and marks the Node
//     talos.dev/cordoned, when the machine enters the shutting-down,
//     upgrading or resetting stage (NodeCordonedSpecController,
//     internal/app/machined/pkg/controllers/k8s/node_cordoned_spec.go),
//     and `talosctl reboot --drain` cordons before it reboots. The node's
//     entries that are Unknown or Down carry it; its conditions keep the
//     facts (which alert holds, and for how long, is the alert rules').
//   - AgentSilent: the kubelet still renews the node's Lease in
//     kube-node-lease: the node is up, its agent is not heard.
//   - NodeUnreachable: the kubelet's Lease expired too (renewTime +
//     leaseDurationSeconds is past): the node is down or cut off.
//   - ManyNodesSilent: the node is one of many that fell silent together
//     (ManySilent); one component-level condition on the node object says
//     it once.
//   - HeartbeatMissed: nothing is known of the kubelet (no Lease seen).
//
// Every answer is a function of the snapshot and now, as the rest of the
// rollup is, so each replica explains a silence the same way.

// TypeSilence is the component-level condition on the node object that
// reports many nodes falling silent at once (reason ManyNodesSilent).
const TypeSilence = "Silence"

// Defaults of the many-nodes-silent rule: Kubernetes' node lifecycle
// controller treats a zone as partially disrupted when more than 2 of its
// nodes, and at least 55 % of them (--unhealthy-zone-threshold), are not
// Ready (ComputeZoneState, pkg/controller/nodelifecycle); the same share
// and count say here that the observer's path, not each node, broke.
const (
	DefaultManySilentShare = 0.55
	DefaultManySilentMin   = 3
)

// silenceKind is what a stale node's silence is, judged from the node
// alone (ManyNodesSilent needs every node: manySilent).
type silenceKind uint8

const (
	notSilent silenceKind = iota
	silentNoKubeFacts
	silentAgent
	silentNode
	silentMaintenance
)

// silenceOf judges entry e at now.
func (c Config) silenceOf(e state.Entry, now time.Time) silenceKind {
	if !c.Stale(e, now) {
		return notSilent
	}
	if e.Kube.InMaintenance() {
		return silentMaintenance
	}
	alive, known := e.Kube.LeaseAlive(now)
	switch {
	case !known:
		return silentNoKubeFacts
	case alive:
		return silentAgent
	}
	return silentNode
}

// silence is the explanation of one stale node: the reason its entries
// and Heartbeat conditions carry, and the message.
type silence struct {
	reason, message string
}

// explainSilences explains every stale node of names (nil for a fresh
// one), and returns the component-level condition of many nodes silent
// at once, if they are.
func (c Config) explainSilences(names []string, snap state.Snapshot, now time.Time) ([]*silence, *status.Condition) {
	out := make([]*silence, len(names))
	kinds := make([]silenceKind, len(names))
	for i, name := range names {
		kinds[i] = c.silenceOf(snap[name], now)
	}
	group, cond := c.manySilent(names, kinds, snap, now)
	for i, name := range names {
		if kinds[i] == notSilent {
			continue
		}
		e := snap[name]
		var base string
		if e.Report == nil {
			base = fmt.Sprintf("no report from this node's agent since this aggregator learned of the node at %s", e.ReceivedAt.UTC().Format(time.RFC3339))
		} else {
			base = fmt.Sprintf("no valid report since %s (grace %s)", e.ReceivedAt.UTC().Format(time.RFC3339), c.Grace(e.Report.Interval))
		}
		kubelet := kubeletPhrase(e.Kube, now)
		s := &silence{}
		switch kinds[i] {
		case silentMaintenance:
			s.reason = report.ReasonPlannedMaintenance
			s.message = fmt.Sprintf("planned maintenance: %s; %s; %s", cordonPhrase(e.Kube), base, kubelet)
		case silentAgent:
			s.reason = report.ReasonAgentSilent
			s.message = fmt.Sprintf("%s while %s: the node is up, its cozy-health agent is not heard (the agent's pod, or its path to this aggregator)", base, kubelet)
		case silentNode:
			s.reason = report.ReasonNodeUnreachable
			s.message = fmt.Sprintf("%s, and %s: the node is down or cut off", base, kubelet)
		default:
			s.reason = report.ReasonHeartbeatMissed
			s.message = base
		}
		if group[name] {
			s.reason = report.ReasonManyNodesSilent
			s.message = fmt.Sprintf("one of %d nodes that fell silent together (%s); %s", len(group), cond.Message, s.message)
		}
		out[i] = s
	}
	return out, cond
}

// kubeletPhrase says what the kubelet Lease shows at now.
func kubeletPhrase(k state.KubeFacts, now time.Time) string {
	alive, known := k.LeaseAlive(now)
	switch {
	case !known:
		return "no kubelet Lease of the node seen in kube-node-lease"
	case alive:
		return fmt.Sprintf("its kubelet renews its Lease (last at %s)", k.LeaseRenewedAt.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("its kubelet Lease expired (last renewed at %s, duration %s)", k.LeaseRenewedAt.UTC().Format(time.RFC3339), k.LeaseDuration)
}

// cordonPhrase says who cordoned the node, as far as the Node shows.
func cordonPhrase(k state.KubeFacts) string {
	if k.TalosCordoned {
		return "the node is cordoned by Talos (" + talosconstants.AnnotationCordonedKey + ": shutting down, upgrading or resetting)"
	}
	return "the node is cordoned (spec.unschedulable: a drain, or a reboot with --drain)"
}

// manyWindow is the window within which nodes falling silent count as
// falling silent together: ManySilentWindow, or by default one heartbeat
// grace of the agents' interval, the spread of the last reports of nodes
// cut at one instant (each last reported somewhere within its interval
// before the cut, and is declared silent a grace later).
func (c Config) manyWindow() time.Duration {
	if c.ManySilentWindow > 0 {
		return c.ManySilentWindow
	}
	return c.Grace(c.DefaultInterval)
}

// manySilent finds the largest set of silent nodes (not in maintenance,
// each with a report: a node never heard did not fall silent) whose last
// reports lie within one window; when it holds at least ManySilentMin
// nodes and ManySilentShare of all nodes, they fell silent together. It
// returns them and the component-level condition that says it, or nil.
func (c Config) manySilent(names []string, kinds []silenceKind, snap state.Snapshot, now time.Time) (map[string]bool, *status.Condition) {
	share, minNodes := c.ManySilentShare, c.ManySilentMin
	if share <= 0 {
		share = DefaultManySilentShare
	}
	if minNodes <= 0 {
		minNodes = DefaultManySilentMin
	}
	need := max(minNodes, int(math.Ceil(share*float64(len(names)))))
	type onset struct {
		name string
		at   time.Time
	}
	var silent []onset
	for i, name := range names {
		switch kinds[i] {
		case silentAgent, silentNode, silentNoKubeFacts:
			if e := snap[name]; e.Report != nil {
				silent = append(silent, onset{name, e.ReceivedAt})
			}
		}
	}
	if len(silent) < need {
		return nil, nil
	}
	sort.Slice(silent, func(i, j int) bool {
		if !silent[i].at.Equal(silent[j].at) {
			return silent[i].at.Before(silent[j].at)
		}
		return silent[i].name < silent[j].name
	})
	w := c.manyWindow()
	bestLo, bestN := 0, 0
	for lo, hi := 0, 0; lo < len(silent); lo++ {
		for hi < len(silent) && silent[hi].at.Sub(silent[lo].at) <= w {
			hi++
		}
		if hi-lo > bestN {
			bestLo, bestN = lo, hi-lo
		}
	}
	if bestN < need {
		return nil, nil
	}
	group := make(map[string]bool, bestN)
	listed := make([]string, 0, min(bestN, 10))
	var agents, down int
	for _, o := range silent[bestLo : bestLo+bestN] {
		group[o.name] = true
		if len(listed) < 10 {
			listed = append(listed, o.name)
		}
		if alive, known := snap[o.name].Kube.LeaseAlive(now); known && alive {
			agents++
		} else if known {
			down++
		}
	}
	sort.Strings(listed)
	more := ""
	if bestN > len(listed) {
		more = fmt.Sprintf(" and %d more", bestN-len(listed))
	}
	first, last := silent[bestLo].at, silent[bestLo+bestN-1].at
	msg := fmt.Sprintf("%d of %d nodes (%.0f%%) fell silent within %s (last reports %s to %s): %s%s; kubelet Leases: %d still renewed, %d expired, %d not seen. One event on the path between these nodes and this aggregator (or their zone), not %d dead nodes",
		bestN, len(names), 100*float64(bestN)/float64(len(names)), w, first.UTC().Format(time.RFC3339), last.UTC().Format(time.RFC3339),
		strings.Join(listed, ", "), more, agents, down, bestN-agents-down, bestN)
	return group, &status.Condition{Type: TypeSilence, Severity: report.StatusUnknown, Reason: report.ReasonManyNodesSilent, Message: msg}
}

// maintenanceEntry is a fresh node's entry ns as written while the node is
// in maintenance: an Unknown or Down entry says PlannedMaintenance, and
// its message keeps what was read.
func maintenanceEntry(ns status.NodeState, k state.KubeFacts) status.NodeState {
	if !k.InMaintenance() || (ns.Status != report.StatusUnknown && ns.Status != report.StatusDown) {
		return ns
	}
	msg := "planned maintenance: " + cordonPhrase(k) + "; read: " + ns.Reason
	if ns.Message != "" {
		msg += ": " + ns.Message
	}
	ns.Reason, ns.Message = report.ReasonPlannedMaintenance, msg
	return ns
}

// nextSilenceChange is the earliest instant after now at which a stale
// node's explanation changes by the clock alone: its kubelet Lease
// expires. The zero time when none will.
func (c Config) nextSilenceChange(e state.Entry, now time.Time) time.Time {
	if !c.Stale(e, now) || e.Kube.InMaintenance() {
		return time.Time{}
	}
	if alive, known := e.Kube.LeaseAlive(now); known && alive {
		return e.Kube.LeaseExpiry().Add(time.Nanosecond)
	}
	return time.Time{}
}

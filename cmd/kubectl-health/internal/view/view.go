// Package view renders Health objects for people: the tree of `kubectl
// health` and the per-node views of `kubectl health nodes|node NAME`. It is
// pure (objects and now in, text out) so that every rule of the display is
// tested on literal input. Its one promise: nothing stale or unknown is ever
// shown as Healthy — an object past status.freshUntil, or without a status,
// reads Unknown (stale) / Unknown (no status), whatever it last said.
package view

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	healthv1alpha1 "github.com/cozystack/cozy-health/pkg/apis/health/v1alpha1"
)

// State is a status as a reader must take it at some instant.
type State struct {
	// Status is the effective status: Unknown when stale or missing.
	Status healthv1alpha1.Status
	// Stale is set when the object is past its freshUntil (or has none).
	Stale bool
	// NoStatus is set when the aggregator never wrote a status.
	NoStatus bool
	// Said is what the object said, when it is not what a reader must take.
	Said healthv1alpha1.Status
}

// Label is the state as shown: "Down", "Unknown (stale)", ...
func (s State) Label() string {
	switch {
	case s.NoStatus:
		return "Unknown (no status)"
	case s.Stale:
		return "Unknown (stale)"
	}
	return string(s.Status)
}

// Rank orders statuses, worst highest: Down > Degraded > Unknown > Healthy.
func Rank(s healthv1alpha1.Status) int {
	switch s {
	case healthv1alpha1.StatusHealthy:
		return 0
	case healthv1alpha1.StatusDegraded:
		return 2
	case healthv1alpha1.StatusDown:
		return 3
	}
	return 1
}

// Effective is h's overall status as a reader must take it at now.
func Effective(h *healthv1alpha1.Health, now time.Time) State {
	st := h.Status
	switch {
	case st.Overall == "":
		return State{Status: healthv1alpha1.StatusUnknown, NoStatus: true}
	case st.FreshUntil == nil || now.After(st.FreshUntil.Time):
		return State{Status: healthv1alpha1.StatusUnknown, Stale: true, Said: st.Overall}
	}
	return State{Status: st.Overall}
}

// conditionRank orders condition problems: False above Unknown.
func conditionRank(c healthv1alpha1.ConditionStatus) int {
	switch c {
	case healthv1alpha1.ConditionFalse:
		return 2
	case healthv1alpha1.ConditionUnknown:
		return 1
	}
	return 0
}

func ts(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func ref(r *healthv1alpha1.ResourceRef) string {
	if r == nil {
		return ""
	}
	if r.Namespace != "" {
		return r.Kind + "/" + r.Namespace + "/" + r.Name
	}
	return r.Kind + "/" + r.Name
}

func detail(reason, message string) string {
	switch {
	case reason != "" && message != "":
		return reason + ": " + message
	case reason != "":
		return reason
	}
	return message
}

// conditionDetail is a condition's reason and message, and for a backup
// the age of its last success (observedAge: the message names instants,
// the age moves with observedAt).
func conditionDetail(c healthv1alpha1.HealthCondition) string {
	d := detail(c.Reason, c.Message)
	if c.ObservedAge != nil && c.LastSuccessfulAt != nil {
		d += "; age " + c.ObservedAge.Duration.Round(time.Minute).String()
	}
	return d
}

func staleDetail(h *healthv1alpha1.Health, s State) string {
	if s.NoStatus {
		return "the aggregator has not written a status"
	}
	if h.Status.FreshUntil == nil {
		return fmt.Sprintf("no freshUntil; last said %s", s.Said)
	}
	return fmt.Sprintf("past freshUntil %s; last said %s", ts(h.Status.FreshUntil.Time), s.Said)
}

// sorted returns the objects ordered problems first: worst effective status,
// then namespace, then name.
func sorted(items []healthv1alpha1.Health, now time.Time) []*healthv1alpha1.Health {
	out := make([]*healthv1alpha1.Health, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	slices.SortStableFunc(out, func(a, b *healthv1alpha1.Health) int {
		if c := cmp.Compare(Rank(Effective(b, now).Status), Rank(Effective(a, now).Status)); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// Tree writes every object as a tree: namespace > component > the
// component's problem nodes and conditions. Namespaces, components and
// problems are ordered worst first.
func Tree(w io.Writer, items []healthv1alpha1.Health, now time.Time) error {
	if len(items) == 0 {
		_, err := fmt.Fprintln(w, "No Health objects found.")
		return err
	}
	objs := sorted(items, now)
	// Namespaces in the order of their worst object (objs is worst first).
	var nss []string
	byNS := map[string][]*healthv1alpha1.Health{}
	for _, h := range objs {
		if _, ok := byNS[h.Namespace]; !ok {
			nss = append(nss, h.Namespace)
		}
		byNS[h.Namespace] = append(byNS[h.Namespace], h)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE / COMPONENT\tSTATE\tDETAIL")
	for _, ns := range nss {
		group := byNS[ns]
		worst := healthv1alpha1.StatusHealthy
		for _, h := range group {
			if s := Effective(h, now).Status; Rank(s) > Rank(worst) {
				worst = s
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t\n", ns, worst)
		for i, h := range group {
			last := i == len(group)-1
			branch, indent := "├─ ", "│  "
			if last {
				branch, indent = "└─ ", "   "
			}
			s := Effective(h, now)
			var d string
			if s.Stale || s.NoStatus {
				d = staleDetail(h, s)
			} else if h.Status.Overall != healthv1alpha1.StatusHealthy {
				d = fmt.Sprintf("%d issue(s)", h.Status.Issues)
			}
			fmt.Fprintf(tw, "%s%s\t%s\t%s\n", branch, h.Name, s.Label(), d)
			if s.Stale || s.NoStatus || s.Status == healthv1alpha1.StatusHealthy {
				continue
			}
			lines := problems(h)
			for j, l := range lines {
				b := "├─ "
				if j == len(lines)-1 {
					b = "└─ "
				}
				fmt.Fprintf(tw, "%s%s%s\t%s\t%s\n", indent, b, l.what, l.state, l.detail)
			}
		}
	}
	return tw.Flush()
}

type line struct {
	what, state, detail string
	rank                int
}

// problems lists an object's non-Healthy nodes then its False / Unknown
// conditions, each worst first.
func problems(h *healthv1alpha1.Health) []line {
	var nodes, conds []line
	for name, ns := range h.Status.Nodes {
		if ns.Status == healthv1alpha1.StatusHealthy {
			continue
		}
		nodes = append(nodes, line{what: "node " + name, state: string(ns.Status), detail: detail(ns.Reason, ns.Message), rank: Rank(ns.Status)})
	}
	for _, c := range h.Status.Conditions {
		if c.Status == healthv1alpha1.ConditionTrue {
			continue
		}
		what := c.Type
		if r := ref(c.ResourceRef); r != "" {
			what += " " + r
		}
		conds = append(conds, line{what: what, state: string(c.Status), detail: conditionDetail(c), rank: conditionRank(c.Status)})
	}
	byRank := func(a, b line) int { return cmp.Or(cmp.Compare(b.rank, a.rank), cmp.Compare(a.what, b.what)) }
	slices.SortStableFunc(nodes, byRank)
	slices.SortStableFunc(conds, byRank)
	return append(nodes, conds...)
}

// NodeEntry is one component's view of one node.
type NodeEntry struct {
	// Object is namespace/name of the Health object.
	Object string
	// State is the component's state on the node at now (Unknown when the
	// object is stale).
	State State
	// Reason and Message explain State.
	Reason, Message string
	// Conditions are the object's conditions pinned to the node that are
	// not True.
	Conditions []healthv1alpha1.HealthCondition
}

// PerNode gathers, for every node named in any object's status.nodes or in
// a Node-pinned condition, each component's view of it.
func PerNode(items []healthv1alpha1.Health, now time.Time) map[string][]NodeEntry {
	out := map[string][]NodeEntry{}
	for _, h := range sorted(items, now) {
		s := Effective(h, now)
		entries := map[string]*NodeEntry{}
		get := func(node string) *NodeEntry {
			e := entries[node]
			if e == nil {
				e = &NodeEntry{Object: h.Namespace + "/" + h.Name, State: State{Status: healthv1alpha1.StatusHealthy}}
				entries[node] = e
			}
			return e
		}
		for node, ns := range h.Status.Nodes {
			e := get(node)
			e.State, e.Reason, e.Message = State{Status: ns.Status}, ns.Reason, ns.Message
		}
		for _, c := range h.Status.Conditions {
			if c.ResourceRef == nil || c.ResourceRef.Kind != "Node" || c.ResourceRef.Name == "" {
				continue
			}
			e := get(c.ResourceRef.Name)
			if _, inNodes := h.Status.Nodes[c.ResourceRef.Name]; !inNodes && Rank(conditionStatus(c.Status)) > Rank(e.State.Status) {
				e.State = State{Status: conditionStatus(c.Status)}
			}
			if c.Status != healthv1alpha1.ConditionTrue {
				e.Conditions = append(e.Conditions, c)
			}
		}
		for node, e := range entries {
			if s.Stale || s.NoStatus {
				e.State = State{Status: healthv1alpha1.StatusUnknown, Stale: s.Stale, NoStatus: s.NoStatus, Said: e.State.Status}
				e.Reason, e.Message = "", staleDetail(h, s)
			}
			out[node] = append(out[node], *e)
		}
	}
	for _, es := range out {
		slices.SortStableFunc(es, func(a, b NodeEntry) int {
			return cmp.Or(cmp.Compare(Rank(b.State.Status), Rank(a.State.Status)), cmp.Compare(a.Object, b.Object))
		})
	}
	return out
}

// conditionStatus maps a condition's polarity to the status it implies at
// least: False is a problem (Degraded), Unknown is Unknown.
func conditionStatus(c healthv1alpha1.ConditionStatus) healthv1alpha1.Status {
	switch c {
	case healthv1alpha1.ConditionTrue:
		return healthv1alpha1.StatusHealthy
	case healthv1alpha1.ConditionFalse:
		return healthv1alpha1.StatusDegraded
	}
	return healthv1alpha1.StatusUnknown
}

func worstOf(es []NodeEntry) State {
	w := State{Status: healthv1alpha1.StatusHealthy}
	for _, e := range es {
		if Rank(e.State.Status) > Rank(w.Status) {
			w = e.State
		}
	}
	return w
}

// Nodes writes one line per node, worst first: its worst state and each
// component's state on it.
func Nodes(w io.Writer, items []healthv1alpha1.Health, now time.Time) error {
	per := PerNode(items, now)
	if len(per) == 0 {
		_, err := fmt.Fprintln(w, "No node-local Health data found.")
		return err
	}
	names := make([]string, 0, len(per))
	for n := range per {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int {
		return cmp.Or(cmp.Compare(Rank(worstOf(per[b]).Status), Rank(worstOf(per[a]).Status)), cmp.Compare(a, b))
	})
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tCOMPONENTS")
	for _, n := range names {
		es := per[n]
		parts := make([]string, 0, len(es))
		for _, e := range es {
			p := e.Object[strings.LastIndex(e.Object, "/")+1:] + "=" + e.State.Label()
			if e.Reason != "" && e.State.Status != healthv1alpha1.StatusHealthy {
				p += "(" + e.Reason + ")"
			}
			parts = append(parts, p)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", n, worstOf(es).Label(), strings.Join(parts, " "))
	}
	return tw.Flush()
}

// Node writes one node's view across components, worst first, with the
// non-True conditions pinned to it. It reports whether the node was found.
func Node(w io.Writer, name string, items []healthv1alpha1.Health, now time.Time) (bool, error) {
	es, ok := PerNode(items, now)[name]
	if !ok {
		_, err := fmt.Fprintf(w, "Node %s appears in no Health object.\n", name)
		return false, err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "NODE %s\t%s\t\n", name, worstOf(es).Label())
	fmt.Fprintln(tw, "COMPONENT\tSTATE\tDETAIL")
	for _, e := range es {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", e.Object, e.State.Label(), detail(e.Reason, e.Message))
		if e.State.Stale || e.State.NoStatus {
			continue
		}
		for _, c := range e.Conditions {
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", c.Type, c.Status, detail(c.Reason, c.Message))
		}
	}
	return true, tw.Flush()
}

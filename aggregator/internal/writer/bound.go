package writer

import (
	"fmt"
	"slices"
	"sort"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/cozystack/cozy-health/aggregator/internal/metrics"
	"github.com/cozystack/cozy-health/aggregator/internal/status"

	"github.com/cozystack/cozy-health/pkg/report"
)

// Why a condition was dropped or cut before a write: the values of the
// reason label of cozy_health_writer_conditions_bounded_total.
const (
	// BoundType: the type is empty, too long or not CamelCase; dropped.
	BoundType = metrics.BoundType
	// BoundResourceRef: the resourceRef has no kind or no name; dropped.
	BoundResourceRef = metrics.BoundResourceRef
	// BoundReason and BoundMessage: too long; truncated.
	BoundReason  = metrics.BoundReason
	BoundMessage = metrics.BoundMessage
	// BoundMaxItems: over the CRD's maxItems; dropped, healthiest first.
	BoundMaxItems = metrics.BoundMaxItems
	// BoundSize: the conditions together over MaxConditionBytes; dropped,
	// healthiest first.
	BoundSize = metrics.BoundSize
)

// MaxConditionBytes bounds the encoded conditions of one object, so the
// object stays below etcd's request limit (1.5 MiB by default) with its
// nodes map, spec and metadata beside them (boundStatus gives them less
// when the nodes need it).
const MaxConditionBytes = 768 << 10

// MaxStatusBytes bounds the encoded status of one object: etcd refuses a
// request over 1.5 MiB (its default --max-request-bytes; the apiserver
// refuses a body over 3 MiB), and the object carries its metadata,
// managedFields and spec beside the status. Without it a 10,000-node
// object whose nodes all missed their heartbeat (about 190 bytes an
// entry) could not be written at all, at the moment it matters most.
const MaxStatusBytes = 1280 << 10

// Why a node entry was shortened: the values of the reason label of
// cozy_health_writer_node_entries_bounded_total.
const (
	BoundNodeMessage       = metrics.BoundNodeMessage
	BoundNodeLastReportAt  = metrics.BoundNodeLastReportAt
	BoundNodeDegradedNodes = metrics.BoundNodeDegradedNodes
	BoundNodeOverLimit     = metrics.BoundNodeOverLimit
)

// minConditionBytes is what the conditions keep when the node entries
// alone are over MaxStatusBytes.
const minConditionBytes = 64 << 10

// statusFixedBytes covers the status's scalar fields (overall, observedAt,
// freshUntil, issues) and the JSON around them.
const statusFixedBytes = 256

// jsonStringSize is the length of s as a JSON string, quotes included, as
// encoding/json writes it (<, >, & and control characters escaped as
// \u00XX; invalid UTF-8 as \ufffd), counted without allocating.
func jsonStringSize(s string) int {
	n := 2
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t':
				n += 2
			case c < 0x20 || c == '<' || c == '>' || c == '&':
				n += 6
			default:
				n++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1, r == '\u2028', r == '\u2029':
			n += 6
		default:
			n += size
		}
		i += size
	}
	return n
}

// nodeEntrySize is the bytes of one status.nodes entry with its status and
// reason only: "name":{"status":"...","reason":"..."}, and a comma.
func nodeEntrySize(name string, ns status.NodeState) int {
	n := jsonStringSize(name) + len(`:{"status":}`) + jsonStringSize(ns.Status.String()) + 1
	if ns.Reason != "" {
		n += len(`,"reason":`) + jsonStringSize(ns.Reason)
	}
	return n
}

// nodeMessageSize and lastReportAtSize are what a message and a
// lastReportAt add to an entry.
func nodeMessageSize(msg string) int { return len(`,"message":`) + jsonStringSize(msg) }

const lastReportAtSize = len(`,"lastReportAt":"2006-01-02T15:04:05Z"`)

// degradedNodesSize is the bytes of status.degradedNodes.
func degradedNodesSize(names []string) int {
	n := len(`,"degradedNodes":""`)
	for _, name := range names {
		n += jsonStringSize(name) - 1
	}
	return n
}

// boundStatus returns cs within the Health CRD's bounds (boundConditions)
// and, whole, within MaxStatusBytes, so the apiserver never refuses the
// status of an object with many nodes that are not Healthy. Every node
// keeps its entry with its status and reason: status.nodes is the
// contract. What gives way, in order:
//
//   - status.degradedNodes (a printer column repeating the map's names) is
//     cut to the names that fit, followed by "+N more", when the entries
//     and it do not fit together;
//   - the conditions get what the node entries leave (at most
//     MaxConditionBytes), dropped healthiest first (boundConditions);
//   - the entries' messages, then their lastReportAt, are kept worst node
//     first (Down, Degraded, Unknown, then by name) while they fit.
//
// When even every entry's status and reason leave less than
// minConditionBytes of the budget (about 17,000 nodes of 20-character
// names, or 10,900 of 63, all Unknown/HeartbeatMissed; over 30,000 Healthy
// ones) the status is written as it is, counted as over_limit: the
// contract cannot hold there, and etcd's refusal (past 1.5 MiB) shows as
// failed writes and the object going stale.
// cs is not modified; it is returned as is when nothing was bounded.
func boundStatus(cs *status.Component) (*status.Component, map[string]int) {
	entries := statusFixedBytes
	var extra int
	for name, ns := range cs.Nodes {
		entries += nodeEntrySize(name, ns)
		if ns.Message != "" {
			extra += nodeMessageSize(ns.Message)
		}
		if !ns.LastReportAt.IsZero() {
			extra += lastReportAtSize
		}
	}
	var counts map[string]int
	degraded := cs.DegradedNodes
	if left := MaxStatusBytes - minConditionBytes - entries; degradedNodesSize(degraded) > left {
		degraded = cutNames(degraded, left-len(`,"degradedNodes":"+9999999 more"`))
		counts = map[string]int{BoundNodeDegradedNodes: 1}
	}
	entries += degradedNodesSize(degraded)
	if entries > MaxStatusBytes-minConditionBytes {
		if counts == nil {
			counts = map[string]int{}
		}
		counts[BoundNodeOverLimit]++
	}
	// Over the budget the conditions keep a floor: the component-level
	// ones (quorum) and the worst listed say most.
	out, condCounts := boundConditionsWithin(cs, min(MaxConditionBytes, max(MaxStatusBytes-entries, minConditionBytes)))
	for r, n := range condCounts {
		if counts == nil {
			counts = map[string]int{}
		}
		counts[r] += n
	}
	left := MaxStatusBytes - entries - conditionsSize(out.Conditions)
	if extra <= left && len(degraded) == len(cs.DegradedNodes) {
		return out, counts
	}
	c := *out
	c.DegradedNodes = degraded
	if extra > left {
		c.Nodes = boundNodeMessages(cs.Nodes, left, func(reason string) {
			if counts == nil {
				counts = map[string]int{}
			}
			counts[reason]++
		})
	}
	return &c, counts
}

// boundNodeMessages returns a copy of nodes whose messages and
// lastReportAt take at most budget bytes, kept worst node first, then by
// name; count receives one reason per field left out.
func boundNodeMessages(nodes map[string]status.NodeState, budget int, count func(string)) map[string]status.NodeState {
	names := make([]string, 0, len(nodes))
	out := make(map[string]status.NodeState, len(nodes))
	for name, ns := range nodes {
		out[name] = ns
		if ns.Message != "" || !ns.LastReportAt.IsZero() {
			names = append(names, name)
		}
	}
	sort.Slice(names, func(i, j int) bool {
		a, b := nodes[names[i]].Status.Rank(), nodes[names[j]].Status.Rank()
		if a != b {
			return a > b
		}
		return names[i] < names[j]
	})
	for _, name := range names {
		ns := out[name]
		if ns.Message != "" {
			if n := nodeMessageSize(ns.Message); n <= budget {
				budget -= n
			} else {
				ns.Message = ""
				count(BoundNodeMessage)
			}
		}
		if !ns.LastReportAt.IsZero() {
			if lastReportAtSize <= budget {
				budget -= lastReportAtSize
			} else {
				ns.LastReportAt = time.Time{}
				count(BoundNodeLastReportAt)
			}
		}
		out[name] = ns
	}
	return out
}

// cutNames is the first names that fit in budget bytes of degradedNodes,
// then "+N more" for the others.
func cutNames(names []string, budget int) []string {
	n := 0
	for n < len(names) && budget >= jsonStringSize(names[n])-1 {
		budget -= jsonStringSize(names[n]) - 1
		n++
	}
	out := append(make([]string, 0, n+1), names[:n]...)
	return append(out, fmt.Sprintf("+%d more", len(names)-n))
}

// conditionSize estimates the bytes of one condition in the applied JSON:
// its strings and the field names, quotes and timestamps around them.
func conditionSize(c status.Condition) int {
	n := 120 + len(c.Type) + jsonStringSize(c.Reason) + jsonStringSize(c.Message)
	switch r := c.Resource; {
	case r != nil:
		n += 40 + len(r.Kind) + len(r.Name) + len(r.Namespace)
	case c.Node != "":
		// Written as resourceRef {kind: Node, name}.
		n += 40 + len(report.KindNode) + len(c.Node)
	}
	if c.Backup != nil {
		n += 120
	}
	return n
}

func conditionsSize(conds []status.Condition) int {
	n := 0
	for _, c := range conds {
		n += conditionSize(c)
	}
	return n
}

// boundConditions returns cs with its conditions within the Health CRD's
// bounds (report.Limits): a condition the apiserver would refuse is
// dropped or truncated, so one bad condition never makes the apiserver
// refuse the object's whole status (and the writer retry it forever while
// the object goes stale). Issues is recounted when a condition is
// dropped. cs is not modified; it is returned as is when nothing is out of
// bounds. The counts are by Bound* reason.
func boundConditions(cs *status.Component) (*status.Component, map[string]int) {
	return boundConditionsWithin(cs, MaxConditionBytes)
}

// boundConditionsWithin is boundConditions with maxBytes for the
// conditions together.
func boundConditionsWithin(cs *status.Component, maxBytes int) (*status.Component, map[string]int) {
	var counts map[string]int
	count := func(reason string, n int) {
		if counts == nil {
			counts = map[string]int{}
		}
		counts[reason] += n
	}
	var out []status.Condition
	for i, c := range cs.Conditions {
		fixed, drop, why := boundCondition(c)
		if len(why) == 0 && out == nil {
			continue
		}
		if out == nil {
			out = append(make([]status.Condition, 0, len(cs.Conditions)), cs.Conditions[:i]...)
		}
		for _, w := range why {
			count(w, 1)
		}
		if !drop {
			out = append(out, fixed)
		}
	}
	conds := cs.Conditions
	if out != nil {
		conds = out
	}
	if excess := len(conds) - report.MaxConditions; excess > 0 {
		// Drop the healthiest first, the last of each status first, so
		// what is bad stays listed; the order is kept.
		dropped := make([]bool, len(conds))
		for _, st := range report.Statuses {
			for i := len(conds) - 1; i >= 0 && excess > 0; i-- {
				if !dropped[i] && conds[i].Severity == st {
					dropped[i] = true
					excess--
				}
			}
		}
		kept := make([]status.Condition, 0, report.MaxConditions)
		for i, c := range conds {
			if !dropped[i] {
				kept = append(kept, c)
			}
		}
		count(BoundMaxItems, len(conds)-len(kept))
		conds = kept
	}
	if size := conditionsSize(conds); size > maxBytes {
		// Past etcd's request limit (1.5 MiB by default) the whole write
		// fails, whatever the schema says: drop the healthiest, the last
		// of each status first, until the conditions fit.
		dropped := make([]bool, len(conds))
		n := 0
		for _, st := range report.Statuses {
			for i := len(conds) - 1; i >= 0 && size > maxBytes; i-- {
				if !dropped[i] && conds[i].Severity == st {
					dropped[i] = true
					size -= conditionSize(conds[i])
					n++
				}
			}
		}
		kept := make([]status.Condition, 0, len(conds)-n)
		for i, c := range conds {
			if !dropped[i] {
				kept = append(kept, c)
			}
		}
		count(BoundSize, n)
		conds = kept
	}
	if counts == nil {
		return cs, nil
	}
	c := *cs
	c.Conditions = conds
	c.Issues = 0
	for _, cond := range conds {
		if cond.ConditionStatus() == "False" {
			c.Issues++
		}
	}
	return &c, counts
}

// boundCondition brings one condition within bounds: why lists what was
// out of them, drop says it cannot be written at all.
func boundCondition(c status.Condition) (fixed status.Condition, drop bool, why []string) {
	if !validType(c.Type) {
		return c, true, []string{BoundType}
	}
	if r := c.Resource; r != nil && (r.Kind == "" || r.Name == "") {
		return c, true, []string{BoundResourceRef}
	}
	if len(c.Reason) > report.MaxReason {
		c.Reason = report.Truncate(c.Reason, report.MaxReason)
		why = append(why, BoundReason)
	}
	if len(c.Message) > report.MaxMessage {
		c.Message = report.Truncate(c.Message, report.MaxMessage)
		why = append(why, BoundMessage)
	}
	return c, false, why
}

// validType tells whether t matches the CRD's type pattern and length.
func validType(t string) bool {
	if t == "" || len(t) > report.MaxConditionType || t[0] < 'A' || t[0] > 'Z' {
		return false
	}
	for i := 1; i < len(t); i++ {
		c := t[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// boundLogPeriod is how often one object's bounded conditions are logged.
const boundLogPeriod = time.Minute

// countBounded counts and (at most once per boundLogPeriod per object)
// logs what boundConditions dropped or cut. w.mu must not be held.
func (w *Writer) countBounded(k Key, counts map[string]int) {
	if len(counts) == 0 {
		return
	}
	total := 0
	for reason, n := range counts {
		if slices.Contains(metrics.NodeBoundReasons, reason) {
			w.metrics.BoundedNodeEntries(reason, n)
		} else {
			w.metrics.BoundedConditions(reason, n)
		}
		total += n
	}
	now := w.clock.Now()
	w.mu.Lock()
	last, logged := w.boundLogged[k]
	ok := !logged || now.Sub(last.at) >= boundLogPeriod
	suppressed := last.suppressed
	if ok {
		w.boundLogged[k] = boundLog{at: now}
	} else {
		last.suppressed += total
		w.boundLogged[k] = last
	}
	w.mu.Unlock()
	if !ok {
		return
	}
	fields := []zap.Field{zap.Stringer("health", k), zap.Int("suppressedSinceLast", suppressed)}
	for _, r := range append(metrics.BoundReasons[:len(metrics.BoundReasons):len(metrics.BoundReasons)], metrics.NodeBoundReasons...) {
		if n := counts[r]; n > 0 {
			fields = append(fields, zap.Int(r, n))
		}
	}
	w.log.Warn("conditions outside the Health CRD's bounds, or node entries over the object's size budget, dropped or shortened; the rest of the status is written", fields...)
}

type boundLog struct {
	at         time.Time
	suppressed int
}

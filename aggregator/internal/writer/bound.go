package writer

import (
	"time"

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
// nodes map (about 40 bytes a node), spec and metadata beside them.
const MaxConditionBytes = 768 << 10

// conditionSize estimates the bytes of one condition in the applied JSON:
// its strings and the field names, quotes and timestamps around them.
func conditionSize(c status.Condition) int {
	n := 120 + len(c.Type) + len(c.Reason) + len(c.Message) + len(c.Node)
	if r := c.Resource; r != nil {
		n += 40 + len(r.Kind) + len(r.Name) + len(r.Namespace)
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
	if size := conditionsSize(conds); size > MaxConditionBytes {
		// Past etcd's request limit (1.5 MiB by default) the whole write
		// fails, whatever the schema says: drop the healthiest, the last
		// of each status first, until the conditions fit.
		dropped := make([]bool, len(conds))
		n := 0
		for _, st := range report.Statuses {
			for i := len(conds) - 1; i >= 0 && size > MaxConditionBytes; i-- {
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
		w.metrics.BoundedConditions(reason, n)
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
	for _, r := range metrics.BoundReasons {
		if n := counts[r]; n > 0 {
			fields = append(fields, zap.Int(r, n))
		}
	}
	w.log.Warn("conditions outside the Health CRD's bounds dropped or truncated; the rest of the status is written", fields...)
}

type boundLog struct {
	at         time.Time
	suppressed int
}

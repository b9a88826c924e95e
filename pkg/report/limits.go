package report

import (
	"fmt"
	"math"
	"unicode/utf8"
)

// The bounds of everything a report carries into a Health object. The
// Health CRD's schema (deploy/crds, from the kubebuilder markers of
// pkg/apis/health/v1alpha1) rejects a whole status for one field outside
// its bounds, so ingest refuses a report any of whose fields would land
// outside them (CheckBounds), the agent keeps its reports inside them
// (Bound, and pkg/wire's Fit for the size), and the aggregator's writer
// drops or truncates a condition that still would not fit.
//
// Limits is the one table; TestLimitsMatchCRD reads the CRD's openAPI
// schema and asserts that every row with a CRD path equals it.

// The Health CRD's bounds on a condition (its openAPI maxItems,
// maxLength, minLength, pattern).
const (
	// MaxConditions is status.conditions' maxItems.
	MaxConditions = 8192
	// MaxConditionType is a condition type's maxLength (metav1.Condition's).
	MaxConditionType = 316
	// ConditionTypePattern is a condition type's pattern.
	ConditionTypePattern = `^[A-Z][A-Za-z0-9]*$`
	// MaxReason is a condition reason's maxLength.
	MaxReason = 1024
	// MaxMessage is a condition message's maxLength.
	MaxMessage = 32768
)

// The bounds of a report that are not the CRD's own, chosen so that what
// the rollup makes of a report fits the CRD's: a check name becomes a
// condition type (CamelCased, prefixed "Check" at most), a resource
// reference a condition's resourceRef.
const (
	// MaxReportBytes bounds one serialized report (the ingest payload
	// limit's default; the agent fits its reports into it).
	MaxReportBytes = 256 << 10
	// MaxObservations bounds the observations of one report.
	MaxObservations = 2048
	// MaxChecks bounds the distinct (component, check) pairs of one
	// report; each is at least one condition per node.
	MaxChecks = 64
	// MaxName bounds a component or check name and an attribute name
	// (a DNS label).
	MaxName = 63
	// NamePattern is a component's or check's name (kebab-case, a DNS
	// label).
	NamePattern = `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// MaxKind and MaxNamespace bound a resource reference's kind and
	// namespace (a Kind and a namespace are DNS labels).
	MaxKind      = 63
	MaxNamespace = 63
	// MaxResourceName bounds a resource reference's name (a DNS subdomain,
	// the longest Kubernetes name).
	MaxResourceName = 253
	// MaxAttributes bounds the attributes of one observation.
	MaxAttributes = 32
	// MaxNodeName bounds the report's node name (a DNS subdomain).
	MaxNodeName = 253
	// MaxInstanceID and MaxAgentVersion bound the agent's instance id and
	// version.
	MaxInstanceID   = 64
	MaxAgentVersion = 128
)

// Limit is one row of the table: a field of a report, or of the Health
// status the aggregator builds from reports, and its bounds. A zero bound
// is no bound.
type Limit struct {
	// Field names the bounded field.
	Field string
	// CRD is the field's path in the Health CRD's schema (property names
	// from the version's openAPIV3Schema, "[]" for a list's items, "{}"
	// for a map's values), when the row is the CRD's own bound; empty for
	// a bound of ours.
	CRD string
	// MinLength and MaxLength bound a string's length in bytes (the CRD
	// counts characters, so bytes are the stricter).
	MinLength, MaxLength int
	// MaxItems bounds a list.
	MaxItems int
	// Pattern is the regular expression a string must match.
	Pattern string
}

// Limits is the table.
var Limits = []Limit{
	// The CRD's own.
	{Field: "condition list", CRD: "status.conditions", MaxItems: MaxConditions},
	{Field: "condition type", CRD: "status.conditions[].type", MinLength: 1, MaxLength: MaxConditionType, Pattern: ConditionTypePattern},
	{Field: "condition reason", CRD: "status.conditions[].reason", MaxLength: MaxReason},
	{Field: "condition message", CRD: "status.conditions[].message", MaxLength: MaxMessage},
	{Field: "condition resourceRef.kind", CRD: "status.conditions[].resourceRef.kind", MinLength: 1},
	{Field: "condition resourceRef.name", CRD: "status.conditions[].resourceRef.name", MinLength: 1},
	{Field: "condition resourceRef.namespace", CRD: "status.conditions[].resourceRef.namespace"},
	{Field: "node state reason", CRD: "status.nodes{}.reason"},
	{Field: "node state message", CRD: "status.nodes{}.message"},

	// A report's, each inside the CRD's bound it lands in.
	{Field: "report size", MaxLength: MaxReportBytes},
	{Field: "node name", MinLength: 1, MaxLength: MaxNodeName},
	{Field: "agent instance id", MinLength: 1, MaxLength: MaxInstanceID},
	{Field: "agent version", MaxLength: MaxAgentVersion},
	{Field: "observations", MaxItems: MaxObservations},
	{Field: "checks", MaxItems: MaxChecks},
	{Field: "component", MinLength: 1, MaxLength: MaxName, Pattern: NamePattern},
	{Field: "check", MinLength: 1, MaxLength: MaxName, Pattern: NamePattern},
	{Field: "reason", MaxLength: MaxReason},
	{Field: "message", MaxLength: MaxMessage},
	{Field: "resourceRef.kind", MinLength: 1, MaxLength: MaxKind},
	{Field: "resourceRef.name", MinLength: 1, MaxLength: MaxResourceName},
	{Field: "resourceRef.namespace", MaxLength: MaxNamespace},
	{Field: "attributes", MaxItems: MaxAttributes},
	{Field: "attribute name", MinLength: 1, MaxLength: MaxName},
}

// isName tells whether s matches NamePattern, without a regexp: ingest
// checks two names of every observation.
func isName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}

// checkString checks one string against its bounds.
func checkString(what, s string, minLen, maxLen int) error {
	switch {
	case len(s) < minLen:
		return fmt.Errorf("%s is empty", what)
	case maxLen > 0 && len(s) > maxLen:
		return fmt.Errorf("%s of %d bytes is over the %d byte limit", what, len(s), maxLen)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s is not UTF-8", what)
	}
	return nil
}

// CheckBounds tells whether every field of r is within Limits; the error
// names the first field that is not. Ingest refuses such a report: one
// field outside the CRD's bounds would make the apiserver refuse the whole
// status of the component it lands in.
func (r *NodeReport) CheckBounds() error {
	for _, f := range [...]struct {
		what     string
		v        string
		min, max int
	}{
		{"node name", r.NodeName, 1, MaxNodeName},
		{"agent instance id", r.AgentInstanceID, 1, MaxInstanceID},
		{"agent version", r.AgentVersion, 0, MaxAgentVersion},
	} {
		if err := checkString(f.what, f.v, f.min, f.max); err != nil {
			return fmt.Errorf("report %w", err)
		}
	}
	if n := len(r.Observations); n > MaxObservations {
		return fmt.Errorf("report has %d observations, over the limit of %d", n, MaxObservations)
	}
	for i := range r.Observations {
		o := &r.Observations[i]
		if err := o.checkBounds(); err != nil {
			return fmt.Errorf("observation %d (%.63s/%.63s): %w", i, o.Component, o.Check, err)
		}
	}
	if len(r.Observations) <= MaxChecks {
		return nil // no more checks than observations
	}
	type key struct{ component, check string }
	checks := map[key]struct{}{}
	for i := range r.Observations {
		o := &r.Observations[i]
		checks[key{o.Component, o.Check}] = struct{}{}
		if len(checks) > MaxChecks {
			return fmt.Errorf("report has more than %d distinct checks", MaxChecks)
		}
	}
	return nil
}

func (o *Observation) checkBounds() error {
	for _, f := range [...]struct {
		what, v string
	}{{"component", o.Component}, {"check", o.Check}} {
		if err := checkString(f.what, f.v, 1, MaxName); err != nil {
			return err
		}
		if !isName(f.v) {
			return fmt.Errorf("%s %q does not match %s", f.what, f.v, NamePattern)
		}
	}
	if err := checkString("reason", o.Reason, 0, MaxReason); err != nil {
		return err
	}
	if err := checkString("message", o.Message, 0, MaxMessage); err != nil {
		return err
	}
	if ref := o.ResourceRef; ref != nil {
		if err := checkString("resourceRef.kind", ref.Kind, 1, MaxKind); err != nil {
			return err
		}
		if err := checkString("resourceRef.name", ref.Name, 1, MaxResourceName); err != nil {
			return err
		}
		if err := checkString("resourceRef.namespace", ref.Namespace, 0, MaxNamespace); err != nil {
			return err
		}
	}
	if n := len(o.Attributes); n > MaxAttributes {
		return fmt.Errorf("%d attributes, over the limit of %d", n, MaxAttributes)
	}
	for k, v := range o.Attributes {
		if err := checkString("attribute name", k, 1, MaxName); err != nil {
			return err
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("attribute %s is not a finite number", k)
		}
	}
	return nil
}

// Truncate cuts s to at most n bytes on a rune boundary, ending it with
// "..." when it was cut (n >= 3).
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n < 3 {
		return s[:0]
	}
	cut := n - 3
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// Bound brings the strings of o that may come from a source (reason,
// message, resource names) within Limits, truncating them, and drops
// attributes that are not finite or over the count; it returns how many
// fields it changed. The agent calls it on every observation, so its own
// reports never fail CheckBounds for a long error text.
func (o *Observation) Bound() int {
	n := 0
	cut := func(s *string, max int) {
		if len(*s) > max || !utf8.ValidString(*s) {
			*s = Truncate(toValidUTF8(*s), max)
			n++
		}
	}
	cut(&o.Reason, MaxReason)
	cut(&o.Message, MaxMessage)
	if ref := o.ResourceRef; ref != nil && (len(ref.Kind) > MaxKind || len(ref.Name) > MaxResourceName || len(ref.Namespace) > MaxNamespace ||
		!utf8.ValidString(ref.Kind+ref.Name+ref.Namespace)) {
		c := *ref
		cut(&c.Kind, MaxKind)
		cut(&c.Name, MaxResourceName)
		cut(&c.Namespace, MaxNamespace)
		o.ResourceRef = &c
	}
	bad := len(o.Attributes) > MaxAttributes
	for k, v := range o.Attributes {
		if math.IsNaN(v) || math.IsInf(v, 0) || k == "" || len(k) > MaxName || !utf8.ValidString(k) {
			bad = true
		}
	}
	if bad {
		attrs := make(map[string]float64, min(len(o.Attributes), MaxAttributes))
		for k, v := range o.Attributes {
			if math.IsNaN(v) || math.IsInf(v, 0) || k == "" || len(k) > MaxName || !utf8.ValidString(k) || len(attrs) == MaxAttributes {
				n++
				continue
			}
			attrs[k] = v
		}
		o.Attributes = attrs
	}
	return n
}

func toValidUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	b := make([]byte, 0, len(s))
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		if r == utf8.RuneError && size == 1 {
			b = append(b, '?')
		} else {
			b = append(b, s[:size]...)
		}
		s = s[size:]
	}
	return string(b)
}

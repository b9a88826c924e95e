package adapterkit

import (
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/cozystack/cozy-health/aggregator/internal/status"
)

// Cond is a projected status condition (metav1.Condition's shape, which
// Flux, Kamaji, CNPG and Cozystack all use).
type Cond struct {
	Type, Status, Reason, Message string
}

// Conditions projects the conditions list at path (status.conditions when
// path is empty), messages truncated.
func Conditions(u *unstructured.Unstructured, path ...string) []Cond {
	if len(path) == 0 {
		path = []string{"status", "conditions"}
	}
	raw, _, _ := unstructured.NestedSlice(u.Object, path...)
	if len(raw) == 0 {
		return nil
	}
	out := make([]Cond, 0, len(raw))
	for _, r := range raw {
		m, ok := r.(map[string]any)
		if !ok {
			continue
		}
		c := Cond{Type: str(m["type"]), Status: str(m["status"]), Reason: str(m["reason"]), Message: status.Truncate(str(m["message"]))}
		if c.Type != "" {
			out = append(out, c)
		}
	}
	return out
}

// Find is the condition of type t, or nil.
func Find(cs []Cond, t string) *Cond {
	for i := range cs {
		if cs[i].Type == t {
			return &cs[i]
		}
	}
	return nil
}

// String is the string at path ("" when absent or not a string).
func String(u *unstructured.Unstructured, path ...string) string {
	s, _, _ := unstructured.NestedString(u.Object, path...)
	return s
}

// Int is the integer at path (0 when absent).
func Int(u *unstructured.Unstructured, path ...string) int64 {
	v, ok, _ := unstructured.NestedFieldNoCopy(u.Object, path...)
	if !ok {
		return 0
	}
	switch x := v.(type) {
	case int64:
		return x
	case float64:
		return int64(x)
	case int:
		return int64(x)
	}
	return 0
}

// Bool is the boolean at path and whether it is set.
func Bool(u *unstructured.Unstructured, path ...string) (value, set bool) {
	v, ok, _ := unstructured.NestedBool(u.Object, path...)
	return v, ok
}

// Time is the RFC 3339 time at path (zero when absent or malformed).
func Time(u *unstructured.Unstructured, path ...string) time.Time {
	return ParseTime(String(u, path...))
}

// FirstTime is the first of the times at paths that is set (a run's end,
// then its start, as backup objects record them), else the object's
// creation: when a backup or job last happened, never a zero time.
func FirstTime(u *unstructured.Unstructured, paths ...[]string) time.Time {
	for _, p := range paths {
		if t := Time(u, p...); !t.IsZero() {
			return t
		}
	}
	return u.GetCreationTimestamp().Time
}

// ParseTime parses an RFC 3339 time; zero when s is empty or malformed.
func ParseTime(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}
	}
	return t
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

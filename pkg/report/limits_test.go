package report

import (
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// crdSchema reads the Health CRD's openAPIV3Schema of its one version.
func crdSchema(t *testing.T) map[string]any {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "deploy", "crds", "health.cozystack.io_healths.yaml"))
	require.NoError(t, err)
	var crd struct {
		Spec struct {
			Versions []struct {
				Schema struct {
					OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	require.NoError(t, yaml.Unmarshal(b, &crd))
	require.Len(t, crd.Spec.Versions, 1)
	return crd.Spec.Versions[0].Schema.OpenAPIV3Schema
}

// walk returns the schema at path ("a.b[].c", "a.m{}.c").
func walk(t *testing.T, s map[string]any, path string) map[string]any {
	t.Helper()
	for _, part := range strings.Split(path, ".") {
		name, suffix := part, ""
		if strings.HasSuffix(part, "[]") || strings.HasSuffix(part, "{}") {
			name, suffix = part[:len(part)-2], part[len(part)-2:]
		}
		props, _ := s["properties"].(map[string]any)
		next, ok := props[name].(map[string]any)
		require.True(t, ok, "%s: no property %s", path, name)
		switch suffix {
		case "[]":
			next, ok = next["items"].(map[string]any)
		case "{}":
			next, ok = next["additionalProperties"].(map[string]any)
		}
		require.True(t, ok, "%s: %s is not a list or map", path, name)
		s = next
	}
	return s
}

func intOf(v any) int {
	f, _ := v.(float64)
	return int(f)
}

// TestLimitsMatchCRD: every row of Limits with a CRD path carries exactly
// the bounds the CRD's schema has there, and every bound the CRD puts on a
// condition or node state is a row: the table cannot drift from the CRD.
func TestLimitsMatchCRD(t *testing.T) {
	root := crdSchema(t)
	seen := map[string]bool{}
	for _, l := range Limits {
		if l.CRD == "" {
			continue
		}
		seen[l.CRD] = true
		s := walk(t, root, l.CRD)
		pattern, _ := s["pattern"].(string)
		assert.Equal(t, Limit{Field: l.Field, CRD: l.CRD, MinLength: intOf(s["minLength"]), MaxLength: intOf(s["maxLength"]), MaxItems: intOf(s["maxItems"]), Pattern: pattern}, l,
			"the CRD's bounds of %s", l.CRD)
	}
	// Every bounded field under status.conditions and status.nodes is in the table.
	var missing []string
	var visit func(path string, s map[string]any)
	visit = func(path string, s map[string]any) {
		for _, k := range []string{"minLength", "maxLength", "maxItems", "pattern"} {
			if _, ok := s[k]; ok && !seen[path] {
				missing = append(missing, path+" ("+k+")")
			}
		}
		props, _ := s["properties"].(map[string]any)
		for name, p := range props {
			p := p.(map[string]any)
			sub := name
			if path != "" {
				sub = path + "." + name
			}
			switch {
			case p["items"] != nil:
				visit(sub, p)
				visit(sub+"[]", p["items"].(map[string]any))
			case p["additionalProperties"] != nil:
				if ap, ok := p["additionalProperties"].(map[string]any); ok {
					visit(sub+"{}", ap)
				}
			default:
				visit(sub, p)
			}
		}
	}
	visit("status", walk(t, root, "status"))
	sort.Strings(missing)
	assert.Empty(t, missing, "bounds of the CRD that Limits does not list")

	// Our own bounds land inside the CRD's: a check name becomes a
	// condition type (rollup.ConditionType: CamelCase, "Check" prefixed at
	// most), a report's reason and message a condition's.
	assert.LessOrEqual(t, MaxName+len("Check"), MaxConditionType)
	assert.LessOrEqual(t, MaxChecks+MaxObservations, MaxConditions, "one report's conditions fit one object")
}

func validReport() *NodeReport {
	return &NodeReport{NodeName: "n1", AgentInstanceID: "i1", AgentVersion: "v1", Observations: []Observation{{
		Component: ComponentLinstor, Check: CheckDRBDResource, Status: StatusHealthy, Reason: "DiskUpToDate",
		ResourceRef: &ResourceRef{Kind: KindResource, Name: "pvc-1"}, Attributes: map[string]float64{AttrReplicas: 3},
	}}}
}

// TestCheckBounds: a report with any one field outside Limits is refused,
// with an error naming the field.
func TestCheckBounds(t *testing.T) {
	require.NoError(t, validReport().CheckBounds())
	for name, tc := range map[string]struct {
		mutate func(r *NodeReport)
		want   string
	}{
		"long reason":        {func(r *NodeReport) { r.Observations[0].Reason = strings.Repeat("R", MaxReason+1) }, "reason of 1025 bytes"},
		"long message":       {func(r *NodeReport) { r.Observations[0].Message = strings.Repeat("m", MaxMessage+1) }, "message of"},
		"empty ref name":     {func(r *NodeReport) { r.Observations[0].ResourceRef.Name = "" }, "resourceRef.name is empty"},
		"empty ref kind":     {func(r *NodeReport) { r.Observations[0].ResourceRef.Kind = "" }, "resourceRef.kind is empty"},
		"long ref name":      {func(r *NodeReport) { r.Observations[0].ResourceRef.Name = strings.Repeat("n", 254) }, "resourceRef.name of 254"},
		"check pattern":      {func(r *NodeReport) { r.Observations[0].Check = "Not_Kebab" }, "does not match"},
		"long check":         {func(r *NodeReport) { r.Observations[0].Check = strings.Repeat("c", 64) }, "check of 64"},
		"empty component":    {func(r *NodeReport) { r.Observations[0].Component = "" }, "component is empty"},
		"nan attribute":      {func(r *NodeReport) { r.Observations[0].Attributes["x"] = nan() }, "not a finite number"},
		"too many attrs":     {func(r *NodeReport) { r.Observations[0].Attributes = manyAttrs(MaxAttributes + 1) }, "33 attributes"},
		"long node name":     {func(r *NodeReport) { r.NodeName = strings.Repeat("n", 254) }, "node name of 254"},
		"long agent version": {func(r *NodeReport) { r.AgentVersion = strings.Repeat("v", 129) }, "agent version"},
		"9,000 check names": {func(r *NodeReport) {
			o := r.Observations[0]
			r.Observations = nil
			for i := range 9000 {
				o.Check = "c" + strings.Repeat("x", i%50) + string(rune('a'+i%26)) + "-" + itoa(i)
				r.Observations = append(r.Observations, o)
			}
		}, "9000 observations"},
		"65 checks": {func(r *NodeReport) {
			o := r.Observations[0]
			r.Observations = nil
			for i := range 65 {
				o.Check = "c" + itoa(i)
				r.Observations = append(r.Observations, o)
			}
		}, "more than 64 distinct checks"},
	} {
		t.Run(name, func(t *testing.T) {
			r := validReport()
			tc.mutate(r)
			err := r.CheckBounds()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestBound: Bound brings an observation's source-given fields within
// Limits.
func TestBound(t *testing.T) {
	r := validReport()
	o := &r.Observations[0]
	o.Reason = strings.Repeat("é", MaxReason)
	o.Message = strings.Repeat("m", MaxMessage+10)
	o.ResourceRef = &ResourceRef{Kind: KindResource, Name: strings.Repeat("n", 300)}
	o.Attributes = manyAttrs(MaxAttributes + 5)
	o.Attributes["bad"] = nan()
	assert.Positive(t, o.Bound())
	require.NoError(t, r.CheckBounds())
	assert.Len(t, o.Reason, MaxReason-1, "cut on a rune boundary")
	assert.True(t, strings.HasSuffix(o.Message, "..."))
	assert.Zero(t, o.Bound(), "a bounded observation stays as it is")
}

func nan() float64 {
	z := 0.0
	return z / z
}

func manyAttrs(n int) map[string]float64 {
	m := map[string]float64{}
	for i := range n {
		m["a"+itoa(i)] = 1
	}
	return m
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

func TestIsNameIsNamePattern(t *testing.T) {
	re := regexp.MustCompile(NamePattern)
	for _, s := range []string{"", "a", "-", "a-", "-a", "a-b", "a--b", "A", "a_b", "fsync-latency", "9", "é", "a.b", "drbd-resource"} {
		assert.Equal(t, re.MatchString(s), isName(s), "%q", s)
	}
}

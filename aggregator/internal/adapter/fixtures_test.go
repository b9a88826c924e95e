package adapter_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/cozystack/cozy-health/test/harness"
)

// epochLine is the header line test/fixtures writes: the time the
// fixtures' timestamps are relative to.
var epochLine = regexp.MustCompile(`(?m)^# Timestamps are relative to (\S+)\.$`)

// fixture returns the object of kind and name (name "" when the file has
// one of that kind) from test/fixtures/generated/<file>, objects
// marshalled from the upstream projects' Go types (make generate), with
// every timestamp moved by now - the fixtures' epoch, so "50 h ago" there
// is 50 h before now here.
func fixture(t *testing.T, file, kind, name string, now time.Time) *unstructured.Unstructured {
	t.Helper()
	path := filepath.Join(harness.RepoRoot(), "test", "fixtures", "generated", file)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	m := epochLine.FindSubmatch(data)
	require.NotNil(t, m, "%s: no epoch line", path)
	epoch, err := time.Parse(time.RFC3339, string(m[1]))
	require.NoError(t, err)
	shift := now.Truncate(time.Second).Sub(epoch)
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var found *unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err)
		}
		if u.Object == nil || u.GetKind() != kind || (name != "" && u.GetName() != name) {
			continue
		}
		require.Nil(t, found, "%s: more than one %s %q", path, kind, name)
		found = u
	}
	require.NotNil(t, found, "%s: no %s %q", path, kind, name)
	found.Object = shiftTimes(found.Object, shift).(map[string]any)
	return found
}

// shiftTimes moves every RFC 3339 string in v by d.
func shiftTimes(v any, d time.Duration) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = shiftTimes(e, d)
		}
	case []any:
		for i, e := range x {
			x[i] = shiftTimes(e, d)
		}
	case string:
		if ts, err := time.Parse(time.RFC3339, x); err == nil {
			return ts.Add(d).UTC().Format(time.RFC3339)
		}
	}
	return v
}

package harness

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// epochLine is the header line test/fixtures writes: the time the
// fixtures' timestamps are relative to.
var epochLine = regexp.MustCompile(`(?m)^# Timestamps are relative to (\S+)\.$`)

// Fixture returns the object of kind and name (name "" when the file has
// one of that kind) from test/fixtures/generated/<file>: objects
// marshalled from the upstream projects' Go types (CNPG, velero, Kamaji;
// make generate), every timestamp moved by now - the fixtures' epoch, so
// "50 h ago" there is 50 h before now here.
func Fixture(file, kind, name string, now time.Time) (*unstructured.Unstructured, error) {
	path := filepath.Join(RepoRoot(), "test", "fixtures", "generated", file)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read fixture: %w", err)
	}
	m := epochLine.FindSubmatch(data)
	if m == nil {
		return nil, fmt.Errorf("fixture %s: no epoch line", path)
	}
	epoch, err := time.Parse(time.RFC3339, string(m[1]))
	if err != nil {
		return nil, fmt.Errorf("fixture %s: epoch: %w", path, err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var found *unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("fixture %s: %w", path, err)
		}
		if u.Object == nil || u.GetKind() != kind || (name != "" && u.GetName() != name) {
			continue
		}
		if found != nil {
			return nil, fmt.Errorf("fixture %s: more than one %s %q", path, kind, name)
		}
		found = u
	}
	if found == nil {
		return nil, fmt.Errorf("fixture %s: no %s %q", path, kind, name)
	}
	found.Object = shiftTimes(found.Object, now.Truncate(time.Second).Sub(epoch)).(map[string]any)
	return found, nil
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

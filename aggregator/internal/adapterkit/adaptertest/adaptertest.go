// Package adaptertest runs an adapter's golden cases: testdata/<case>.yaml
// holds the objects in their real shapes (as kubectl get -o yaml prints
// them, status included) and a TestCase document (the time, tenant
// namespaces, backup SLAs); testdata/<case>.golden is what Judge found,
// one line per condition. Regenerate with go test -update.
package adaptertest

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/tools/cache"

	"github.com/cozystack/cozy-health/aggregator/internal/adapterkit"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// testCase is the TestCase document of a case file.
type testCase struct {
	Now     time.Time                `json:"now"`
	Tenants []string                 `json:"tenants"`
	MaxAge  map[string]time.Duration `json:"-"`
	RawAge  map[string]string        `json:"maxAge"`
}

// Run runs every case in dir against a.
func Run(t *testing.T, a adapterkit.Adapter, dir string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "no cases in %s", dir)
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		t.Run(name, func(t *testing.T) {
			got := Judge(t, a, f)
			golden := strings.TrimSuffix(f, ".yaml") + ".golden"
			if *update {
				require.NoError(t, os.WriteFile(golden, []byte(got), 0o644))
			}
			want, err := os.ReadFile(golden)
			require.NoError(t, err, "run with -update to create it")
			require.Equal(t, string(want), got)
		})
	}
}

// Judge loads one case file and renders what a found.
func Judge(t *testing.T, a adapterkit.Adapter, file string) string {
	t.Helper()
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	tc := testCase{}
	stores := map[schema.GroupVersionResource]cache.Store{}
	for _, s := range a.Sources() {
		if !s.Optional {
			stores[s.GVR] = cache.NewStore(cache.MetaNamespaceKeyFunc)
		}
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err)
		}
		if len(raw) == 0 || string(raw) == "null" {
			continue
		}
		// Decoded as the apiserver's clients decode it (integers as int64).
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(raw); err != nil {
			// A TestCase has no apiVersion, which UnmarshalJSON wants.
			require.NoError(t, json.Unmarshal(raw, &u.Object))
		}
		if u.GetKind() == "TestCase" {
			now, _, _ := unstructured.NestedString(u.Object, "now")
			tc.Now, err = time.Parse(time.RFC3339, now)
			require.NoError(t, err)
			tc.Tenants, _, _ = unstructured.NestedStringSlice(u.Object, "tenants")
			ages, _, _ := unstructured.NestedStringMap(u.Object, "maxAge")
			tc.MaxAge = map[string]time.Duration{}
			for k, v := range ages {
				d, err := time.ParseDuration(v)
				require.NoError(t, err)
				tc.MaxAge[k] = d
			}
			continue
		}
		gv, err := schema.ParseGroupVersion(u.GetAPIVersion())
		require.NoError(t, err)
		var src *adapterkit.Source
		for _, s := range a.Sources() {
			if s.GVR.GroupVersion() == gv && s.Kind == u.GetKind() {
				src = &s
			}
		}
		require.NotNil(t, src, "%s %s is no source of %s", u.GetAPIVersion(), u.GetKind(), a.Name())
		if stores[src.GVR] == nil {
			stores[src.GVR] = cache.NewStore(cache.MetaNamespaceKeyFunc)
		}
		require.NoError(t, stores[src.GVR].Add(adapterkit.CachedObject(u, src.Project)))
	}
	require.False(t, tc.Now.IsZero(), "%s: no TestCase document with now", file)
	tenants := map[string]bool{}
	for _, n := range tc.Tenants {
		tenants[n] = true
	}
	in := adapterkit.NewInput(tc.Now, "cozy-system", stores, func(ns string) bool { return tenants[ns] },
		func(scope string) time.Duration {
			if d, ok := tc.MaxAge[scope]; ok {
				return d
			}
			return tc.MaxAge["*"]
		})
	return Render(a.Judge(in))
}

// Render prints findings one per line, sorted.
func Render(fs []adapterkit.Finding) string {
	lines := make([]string, 0, len(fs))
	for _, f := range fs {
		c := f.Condition
		ref := "-"
		if c.Resource != nil {
			ref = c.Resource.Kind + " " + adapterkit.Key(c.Resource.Namespace, c.Resource.Name)
		}
		line := fmt.Sprintf("%s/%s %s %s(%s) %s [%s] %q", f.Namespace, f.Component, c.Type, c.ConditionStatus(), c.Severity, c.Reason, ref, c.Message)
		if b := c.Backup; b != nil {
			last := "never"
			if !b.LastSuccessfulAt.IsZero() {
				last = b.LastSuccessfulAt.UTC().Format(time.RFC3339)
			}
			line += fmt.Sprintf(" lastSuccessfulAt=%s maxAge=%s observedAge=%s", last, b.MaxAge, b.ObservedAge)
		}
		lines = append(lines, line)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n") + "\n"
}

// SameVerdicts requires each golden case built from an older release's
// types (v<version>-<case>.golden, test/fixtures/oldest) to read exactly
// as the same case built from the shipped release's (<case>.golden): the
// adapter judges both releases alike.
func SameVerdicts(t *testing.T, dir string) {
	t.Helper()
	older, err := filepath.Glob(filepath.Join(dir, "v[0-9]*-*.golden"))
	require.NoError(t, err)
	require.NotEmpty(t, older, "no older release's cases in %s", dir)
	for _, f := range older {
		base := filepath.Base(f)
		shipped := filepath.Join(dir, base[strings.IndexByte(base, '-')+1:])
		got, err := os.ReadFile(f)
		require.NoError(t, err)
		want, err := os.ReadFile(shipped)
		require.NoError(t, err, "%s has no shipped counterpart", f)
		require.Equal(t, string(want), string(got), "%s judged unlike %s", base, filepath.Base(shipped))
	}
}

// Package render renders the cozy-health Helm chart with the Helm Go SDK,
// exactly as `helm template` (and `helm install`) would: values merged over
// values.yaml, checked against values.schema.json, templates rendered,
// objects sorted in Helm's install order, CRDs first. `make manifests`, the
// chart's tests and the lab use it; the agent and the aggregator never import
// it (Helm is a large dependency).
package render

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/releaseutil"
	"helm.sh/helm/v3/pkg/strvals"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/cozy-health/deploy"
)

// Defaults of Options.
const (
	DefaultRelease   = "cozy-health"
	DefaultNamespace = "cozy-health"
	// DefaultKubeVersion is the Kubernetes version the chart is rendered
	// for (the test control plane's).
	DefaultKubeVersion = "v1.37.2"
)

// Options say how to render.
type Options struct {
	// Release and Namespace are the release's name and namespace.
	Release, Namespace string
	// Values are merged over the chart's values.yaml (as helm -f).
	Values map[string]any
	// Set are --set style assignments applied after Values.
	Set []string
	// KubeVersion is .Capabilities.KubeVersion.
	KubeVersion string
	// APIVersions are added to .Capabilities.APIVersions (e.g.
	// "cert-manager.io/v1"), as a cluster serving them would report.
	APIVersions []string
	// Cluster, when set, answers the templates' lookup calls (as helm
	// install does); without it lookups find nothing (as helm template).
	Cluster *rest.Config
}

// Manifest is one rendered object's document.
type Manifest struct {
	// Source is the chart file it came from (templates/x.yaml or crds/x.yaml).
	Source string
	// Kind and Name identify it.
	Kind, Name string
	// Content is the YAML document.
	Content string
}

// Release is a rendered chart.
type Release struct {
	// CRDs are the chart's crds/ files (Helm installs them first).
	CRDs []Manifest
	// Manifests are the templates' objects in Helm's install order.
	Manifests []Manifest
	// Notes is the rendered NOTES.txt.
	Notes string
}

// LoadChart loads the embedded chart.
func LoadChart() (*chart.Chart, error) {
	return LoadChartFS(deploy.Chart())
}

// LoadChartFS loads a chart from a file system rooted at its directory.
func LoadChartFS(fsys fs.FS) (*chart.Chart, error) {
	var files []*loader.BufferedFile
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		files = append(files, &loader.BufferedFile{Name: p, Data: data})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read chart: %w", err)
	}
	c, err := loader.LoadFiles(files)
	if err != nil {
		return nil, fmt.Errorf("load chart: %w", err)
	}
	return c, nil
}

// Render renders the embedded chart.
func Render(o Options) (*Release, error) {
	c, err := LoadChart()
	if err != nil {
		return nil, err
	}
	return RenderChart(c, o)
}

// RenderChart renders c with o. A value the schema refuses is an error that
// names it.
func RenderChart(c *chart.Chart, o Options) (*Release, error) {
	if o.Release == "" {
		o.Release = DefaultRelease
	}
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.KubeVersion == "" {
		o.KubeVersion = DefaultKubeVersion
	}
	vals := map[string]any{}
	if o.Values != nil {
		// A deep copy: the caller's map is not touched by the merge.
		b, err := yaml.Marshal(o.Values)
		if err != nil {
			return nil, fmt.Errorf("encode values: %w", err)
		}
		if err := yaml.Unmarshal(b, &vals); err != nil {
			return nil, fmt.Errorf("decode values: %w", err)
		}
	}
	for _, s := range o.Set {
		if err := strvals.ParseInto(s, vals); err != nil {
			return nil, fmt.Errorf("parse --set %q: %w", s, err)
		}
	}
	kv, err := chartutil.ParseKubeVersion(o.KubeVersion)
	if err != nil {
		return nil, fmt.Errorf("kube version %q: %w", o.KubeVersion, err)
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = *kv
	caps.APIVersions = append(caps.APIVersions, o.APIVersions...)
	if err := chartutil.ProcessDependenciesWithMerge(c, vals); err != nil {
		return nil, fmt.Errorf("chart dependencies: %w", err)
	}
	top, err := chartutil.ToRenderValues(c, vals, chartutil.ReleaseOptions{Name: o.Release, Namespace: o.Namespace, IsInstall: true, Revision: 1}, caps)
	if err != nil {
		return nil, err
	}
	eng := engine.Engine{}
	if o.Cluster != nil {
		eng = engine.New(o.Cluster)
	}
	files, err := eng.Render(c, top)
	if err != nil {
		return nil, fmt.Errorf("render chart: %w", err)
	}
	r := &Release{}
	for name, content := range files {
		if strings.HasSuffix(name, "NOTES.txt") {
			r.Notes = content
			delete(files, name)
		}
	}
	_, sorted, err := releaseutil.SortManifests(files, caps.APIVersions, releaseutil.InstallOrder)
	if err != nil {
		return nil, fmt.Errorf("sort manifests: %w", err)
	}
	for _, m := range sorted {
		src := strings.TrimPrefix(m.Name, c.Name()+"/")
		r.Manifests = append(r.Manifests, Manifest{Source: src, Kind: m.Head.Kind, Name: m.Head.Metadata.Name, Content: strings.TrimSpace(m.Content)})
	}
	crds := c.CRDObjects()
	sort.Slice(crds, func(i, j int) bool { return crds[i].Filename < crds[j].Filename })
	for _, crd := range crds {
		var head releaseutil.SimpleHead
		if err := yaml.Unmarshal(crd.File.Data, &head); err != nil {
			return nil, fmt.Errorf("decode %s: %w", crd.Filename, err)
		}
		name := ""
		if head.Metadata != nil {
			name = head.Metadata.Name
		}
		r.CRDs = append(r.CRDs, Manifest{Source: path.Join("crds", path.Base(crd.Filename)), Kind: head.Kind, Name: name, Content: strings.TrimSpace(string(crd.File.Data))})
	}
	return r, nil
}

// All is the CRDs followed by the other objects: the order to apply them in.
func (r *Release) All() []Manifest {
	return append(append([]Manifest{}, r.CRDs...), r.Manifests...)
}

// YAML is every object as one multi-document stream, each preceded by the
// chart file it came from (as `helm template --include-crds` prints it).
func (r *Release) YAML() []byte {
	var b bytes.Buffer
	for _, m := range r.All() {
		fmt.Fprintf(&b, "---\n# Source: cozy-health/%s\n%s\n", m.Source, m.Content)
	}
	return b.Bytes()
}

// Objects decodes every manifest, CRDs first.
func (r *Release) Objects() ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, m := range r.All() {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(m.Content), &u.Object); err != nil {
			return nil, fmt.Errorf("decode %s %s from %s: %w", m.Kind, m.Name, m.Source, err)
		}
		out = append(out, u)
	}
	return out, nil
}

// ErrNotFound is returned by Object when the release has no such object.
var ErrNotFound = errors.New("not rendered")

// Object returns the rendered object of kind and name.
func (r *Release) Object(kind, name string) (*unstructured.Unstructured, error) {
	objs, err := r.Objects()
	if err != nil {
		return nil, err
	}
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o, nil
		}
	}
	return nil, fmt.Errorf("%s %s: %w", kind, name, ErrNotFound)
}

// Lint runs Helm's linter (as `helm lint --strict`) on the chart in dir with
// values, and returns every message of severity warning or worse.
func Lint(dir string, values map[string]any, namespace string) []support.Message {
	kv, _ := chartutil.ParseKubeVersion(DefaultKubeVersion)
	linter := lint.AllWithKubeVersion(dir, values, namespace, kv)
	var out []support.Message
	for _, m := range linter.Messages {
		if m.Severity >= support.WarningSev {
			out = append(out, m)
		}
	}
	return out
}

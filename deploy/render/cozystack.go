package render

import (
	"fmt"
	"io/fs"
	"path"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/cozy-health/deploy"
)

// PackageSourceFile is cozy-health's Cozystack PackageSource, relative to
// deploy.CozystackDir (and to Cozystack's repository root).
const PackageSourceFile = "packages/core/platform/sources/cozy-health.yaml"

// LibraryPath is where the PackageSource finds the upstream chart in
// Cozystack's packages (spec.variants[].libraries[].path): this repository's
// deploy/charts/cozy-health, copied there.
const LibraryPath = "library/cozy-health"

// PackageSource is the part of Cozystack's PackageSource
// (cozystack.io/v1alpha1) that says how a component's chart is assembled and
// installed.
type PackageSource struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Variants []struct {
			Name      string   `json:"name"`
			DependsOn []string `json:"dependsOn"`
			Libraries []struct {
				Name string `json:"name"`
				Path string `json:"path"`
			} `json:"libraries"`
			Components []struct {
				Name      string   `json:"name"`
				Path      string   `json:"path"`
				Libraries []string `json:"libraries"`
				Install   *struct {
					Namespace   string `json:"namespace"`
					ReleaseName string `json:"releaseName"`
					Privileged  bool   `json:"privileged"`
					UpgradeCRDs string `json:"upgradeCRDs"`
				} `json:"install"`
			} `json:"components"`
		} `json:"variants"`
	} `json:"spec"`
}

// LoadPackageSource reads the shipped PackageSource.
func LoadPackageSource() (*PackageSource, error) {
	b, err := fs.ReadFile(deploy.Cozystack(), PackageSourceFile)
	if err != nil {
		return nil, err
	}
	var ps PackageSource
	// Fields this type leaves out (sourceRef, ...) are ignored: the CRD
	// test (test/integration) validates the whole object.
	if err := yaml.Unmarshal(b, &ps); err != nil {
		return nil, fmt.Errorf("decode %s: %w", PackageSourceFile, err)
	}
	return &ps, nil
}

// LoadCozystackComponent assembles the chart of a PackageSource component as
// Cozystack's package operator does (its PackageSource reconciler's copy
// operations): the component's path as the chart, and each library it names
// copied into charts/<library name>/. The one library path known here,
// LibraryPath, is this repository's chart.
func LoadCozystackComponent(ps *PackageSource, variant, component string) (*chart.Chart, error) {
	for _, v := range ps.Spec.Variants {
		if v.Name != variant {
			continue
		}
		libs := map[string]string{}
		for _, l := range v.Libraries {
			name := l.Name
			if name == "" {
				name = path.Base(l.Path)
			}
			libs[name] = l.Path
		}
		for _, c := range v.Components {
			if c.Name != component {
				continue
			}
			var files []*loader.BufferedFile
			add := func(fsys fs.FS, root, prefix string) error {
				return fs.WalkDir(fsys, root, func(p string, d fs.DirEntry, err error) error {
					if err != nil || d.IsDir() {
						return err
					}
					data, err := fs.ReadFile(fsys, p)
					if err != nil {
						return err
					}
					rel := p
					if root != "." {
						rel = p[len(root)+1:]
					}
					files = append(files, &loader.BufferedFile{Name: path.Join(prefix, rel), Data: data})
					return nil
				})
			}
			if err := add(deploy.Cozystack(), path.Join("packages", c.Path), ""); err != nil {
				return nil, fmt.Errorf("component %s: %w", c.Path, err)
			}
			for _, name := range c.Libraries {
				p, ok := libs[name]
				if !ok {
					return nil, fmt.Errorf("component %s names library %q, which variant %s does not define", c.Name, name, v.Name)
				}
				if p != LibraryPath {
					return nil, fmt.Errorf("library %s: path %s is not %s", name, p, LibraryPath)
				}
				if err := add(deploy.Chart(), ".", path.Join("charts", name)); err != nil {
					return nil, err
				}
			}
			ch, err := loader.LoadFiles(files)
			if err != nil {
				return nil, fmt.Errorf("load component %s: %w", c.Name, err)
			}
			return ch, nil
		}
		return nil, fmt.Errorf("variant %s has no component %s", variant, component)
	}
	return nil, fmt.Errorf("no variant %s", variant)
}

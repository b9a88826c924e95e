package harness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"
)

// InstallCRDFiles applies every CustomResourceDefinition in the given files
// (absolute paths, or paths relative to test/crds, e.g.
// "cozystack/cozystack.io_packages.yaml": the projects' own CRD YAML, each
// file saying where it came from; one or more documents a file) and waits
// until each is Established.
func (c *ControlPlane) InstallCRDFiles(ctx context.Context, files ...string) error {
	for _, n := range files {
		if err := c.installCRDFile(ctx, n, nil); err != nil {
			return err
		}
	}
	return nil
}

// installCRDFile applies every CRD in one file (absolute, or relative to
// test/crds), each passed through edit first when edit is not nil.
func (c *ControlPlane) installCRDFile(ctx context.Context, n string, edit func(obj map[string]any)) error {
	f := n
	if !filepath.IsAbs(f) {
		f = filepath.Join(RepoRoot(), "test", "crds", n)
	}
	raw, err := os.ReadFile(f)
	if err != nil {
		return fmt.Errorf("read %s: %w", f, err)
	}
	for _, doc := range bytes.Split(raw, []byte("\n---")) {
		var obj map[string]any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			return fmt.Errorf("decode %s: %w", f, err)
		}
		if len(obj) == 0 {
			continue
		}
		if edit != nil {
			edit(obj)
		}
		b, err := yaml.Marshal(obj)
		if err != nil {
			return err
		}
		if err := c.applyCRD(ctx, n, b); err != nil {
			return err
		}
	}
	return nil
}

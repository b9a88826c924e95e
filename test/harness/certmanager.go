package harness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"
)

// CertManagerCRDs are the file names under test/crds/certmanager: the
// cert-manager.io/v1 Issuer and Certificate CRDs (hack/certmanager-crds.sh).
var CertManagerCRDs = []string{"crd-issuers.yaml", "crd-certificates.yaml"}

// InstallCertManagerCRDs installs cert-manager's Issuer and Certificate
// CRDs, so that the apiserver serves cert-manager.io/v1 and validates such
// objects against cert-manager's own schema, and waits until each is
// Established. No cert-manager controller runs: nothing is issued.
func (c *ControlPlane) InstallCertManagerCRDs(ctx context.Context) error {
	for _, n := range CertManagerCRDs {
		f := filepath.Join(RepoRoot(), "test", "crds", "certmanager", n)
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
			// The labels are cert-manager's chart templates as text.
			if md, ok := obj["metadata"].(map[string]any); ok {
				delete(md, "labels")
			}
			b, err := yaml.Marshal(obj)
			if err != nil {
				return err
			}
			if err := c.applyCRD(ctx, n, b); err != nil {
				return err
			}
		}
	}
	return nil
}

package harness

import (
	"context"
	"path/filepath"
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
		// The labels are cert-manager's chart templates as text.
		dropLabels := func(obj map[string]any) {
			if md, ok := obj["metadata"].(map[string]any); ok {
				delete(md, "labels")
			}
		}
		if err := c.installCRDFile(ctx, filepath.Join("certmanager", n), dropLabels); err != nil {
			return err
		}
	}
	return nil
}

//go:build tools

// Package krew pins krew's own manifest validator, validate-krew-manifest
// (the one krew-index's CI runs on every plugin manifest), which hack/krew
// and the signing test (test/signing) run on the generated kubectl-health
// manifest. It is built from the Go module proxy at the version in this
// module's go.mod by hack/tooldir.sh krew.
package krew

import (
	_ "sigs.k8s.io/krew/cmd/krew"
	_ "sigs.k8s.io/krew/cmd/validate-krew-manifest"
)

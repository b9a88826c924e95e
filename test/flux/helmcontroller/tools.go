//go:build tools

// Package helmcontroller pins Flux's helm-controller, which the Flux test
// (test/flux) runs against the harness apiserver so the HelmRelease adapter
// reads what the real controller writes. It is built from the Go module
// proxy at the version in this module's go.mod by `make flux`; the replace
// directives are helm-controller's own (Go ignores a dependency's), so the
// build selects the same module versions upstream's does.
package helmcontroller

import (
	_ "github.com/fluxcd/helm-controller"
)

//go:build tools

// Package sourcecontroller pins Flux's source-controller, which serves the
// Flux test's (test/flux) charts to helm-controller from a HelmRepository
// on loopback. It is built from the Go module proxy at the version in this
// module's go.mod by `make flux`; the replace directive is
// source-controller's own (Go ignores a dependency's), so the build selects
// the same module versions upstream's does.
package sourcecontroller

import (
	_ "github.com/fluxcd/source-controller"
)

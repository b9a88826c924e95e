//go:build tools

// Package syft pins Anchore's syft, which hack/sign runs to generate an SPDX
// SBOM of every image of a release (from the registry, per platform; the Go
// modules come from each binary's build information). It is built from the Go
// module proxy at the version in this module's go.mod by hack/tooldir.sh syft.
package syft

import (
	_ "github.com/anchore/syft/cmd/syft"
)

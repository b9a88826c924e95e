//go:build tools

// Package actionlint pins rhysd/actionlint, which `make lint` runs on
// .github/workflows/*. It is built from the Go module proxy at the version in
// this module's go.mod by hack/tooldir.sh actionlint.
package actionlint

import (
	_ "github.com/rhysd/actionlint/cmd/actionlint"
)

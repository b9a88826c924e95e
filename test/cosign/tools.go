//go:build tools

// Package cosign pins Sigstore's cosign, which hack/sign runs to sign a
// release's images, chart and package artifact and to attach their SBOMs as
// attestations, and which the signing test (test/signing) runs to verify
// them. It is built from the Go module proxy at the version in this module's
// go.mod (v3.1.3: the newest whose go directive this repository's Go
// toolchain meets; v3.1.4 wants Go 1.27) by hack/tooldir.sh cosign.
package cosign

import (
	_ "github.com/sigstore/cosign/v3/cmd/cosign"
)

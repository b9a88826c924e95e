# Sigstore's cosign from the nested module test/cosign (v3.1.3): hack/sign
# signs a release's images, chart and package artifact and attaches their SBOMs
# as attestations with it; the signing test (test/signing) verifies them.
# A manifest of hack/tooldir.sh.
key_files=(test/cosign/go.mod test/cosign/go.sum)
bins=(cosign)
first_time="first time takes 7 to 14 minutes on 2 cores"

build() {
	cd test/cosign
	local v
	v="$(go list -m -f '{{.Version}}' github.com/sigstore/cosign/v3)"
	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X sigs.k8s.io/release-utils/version.gitVersion=${v}" -o "$1/cosign" \
		github.com/sigstore/cosign/v3/cmd/cosign
}

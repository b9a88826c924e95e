# Anchore's syft from the nested module test/syft: hack/sign generates each
# image's SPDX SBOM with it (from the registry, per platform). Built with the
# tags of syft's own release build (containers_image_openpgp: no cgo gpgme).
# A manifest of hack/tooldir.sh.
key_files=(test/syft/go.mod test/syft/go.sum)
bins=(syft)
first_time="first time takes several minutes on 2 cores"

build() {
	cd test/syft
	local v
	v="$(go list -m -f '{{.Version}}' github.com/anchore/syft)"
	CGO_ENABLED=0 go build -trimpath -tags containers_image_openpgp,exclude_graphdriver_btrfs -ldflags "-s -w -X main.version=${v#v}" -o "$1/syft" \
		github.com/anchore/syft/cmd/syft
}

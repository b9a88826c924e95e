#!/usr/bin/env bash
# Refreshes the cert-manager CustomResourceDefinitions (Issuer, Certificate)
# the chart's cert-manager templates are validated against on the test
# apiserver (test/crds/certmanager), from the YAML cert-manager ships in its Go
# module, fetched through the Go module proxy, descriptions stripped. The
# files carry the cert-manager chart's label templates as text; the harness
# drops metadata.labels when it installs them.
set -euo pipefail
cd "$(dirname "$0")/.."
mod=github.com/cert-manager/cert-manager@v1.18.2
out=test/crds/certmanager
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dir=$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "$mod" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
if [[ -z "$dir" ]]; then
	echo "certmanager-crds: cannot download $mod" >&2
	exit 1
fi
for f in crd-issuers.yaml crd-certificates.yaml; do
	{
		echo "# Origin: $mod, deploy/crds/$f (descriptions stripped by hack/crdstrip)."
		go run ./hack/crdstrip "$dir/deploy/crds/$f"
	} >"$out/$f"
done

#!/usr/bin/env bash
# Refreshes test/crds/cilium: Cilium's CiliumNetworkPolicy CRD at the version
# Cozystack ships (packages/system/cilium: chart and app 1.19.5), from
# Cilium's Go module through the Go module proxy, descriptions stripped. The
# chart's CiliumNetworkPolicy is applied against it in test/integration.
set -euo pipefail
cd "$(dirname "$0")/.."
mod=github.com/cilium/cilium@v1.19.5
f=pkg/k8s/apis/cilium.io/client/crds/v2/ciliumnetworkpolicies.yaml
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dir=$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "$mod" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
if [[ -z "$dir" ]]; then
	echo "cilium-crds: cannot download $mod" >&2
	exit 1
fi
mkdir -p test/crds/cilium
{
	echo "# Origin: $mod, $f (descriptions stripped by hack/crdstrip)."
	go run ./hack/crdstrip "$dir/$f"
} >test/crds/cilium/cilium.io_ciliumnetworkpolicies.yaml

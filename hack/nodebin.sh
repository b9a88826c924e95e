#!/usr/bin/env bash
# Builds kubelet, kube-controller-manager, kube-scheduler and kube-proxy from the
# nested module test/nodebin (with the CRI sandbox binary pause), and CoreDNS
# from test/nodebin/coredns, into a cache directory outside the repository,
# keyed on those modules' go.mod, go.sum and main.go files, and prints the
# directory. test/nodebin pins the same k8s.io/kubernetes
# version and staging replaces as test/controlplane, so most packages come from
# the Go build cache the apiserver build filled.
# A cache hit costs a hash and a stat. Another process building the same key is
# waited for (flock), never raced.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mod="${root}/test/nodebin"
key="$(cat "${mod}/go.mod" "${mod}/go.sum" "${mod}/coredns/go.mod" "${mod}/coredns/go.sum" "${mod}/coredns/main.go" "${mod}/pause/main.go" | sha256sum | cut -c1-16)"
cache="${COZY_HEALTH_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/cozy-health}"
dir="${cache}/nodebin/${key}"
bins=(kubelet kube-controller-manager kube-scheduler kube-proxy coredns pause)

complete() {
	local b
	for b in "${bins[@]}"; do [[ -x "${dir}/${b}" ]] || return 1; done
}

if complete; then
	echo "${dir}"
	exit 0
fi

mkdir -p "${cache}/nodebin"
exec 9>"${dir}.lock"
flock 9
if complete; then
	echo "${dir}"
	exit 0
fi

tmp="${dir}.tmp.$$"
mkdir -p "${tmp}"
trap 'rm -rf "${tmp}"' EXIT

kv=v1.37.2
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X ${pkg}.gitVersion=${kv} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=37 -X ${pkg}.gitTreeState=clean"
done

echo "nodebin: building ${bins[*]} ${kv} into ${dir} (first time: ~4 min of CPU after testbin filled the Go build cache)" >&2
start=$(date +%s)
(
	cd "${mod}"
	CGO_ENABLED=0 go build ${NODEBIN_GOFLAGS:-} -trimpath -ldflags "${ldflags}" -o "${tmp}/" \
		k8s.io/kubernetes/cmd/kubelet \
		k8s.io/kubernetes/cmd/kube-controller-manager \
		k8s.io/kubernetes/cmd/kube-scheduler \
		k8s.io/kubernetes/cmd/kube-proxy
	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "${tmp}/pause" ./pause
	cd coredns
	CGO_ENABLED=0 go build ${NODEBIN_GOFLAGS:-} -trimpath -ldflags "-s -w" -o "${tmp}/coredns" .
)
mv "${tmp}" "${dir}"
trap - EXIT
echo "nodebin: built in $(( $(date +%s) - start ))s" >&2
echo "${dir}"

#!/usr/bin/env bash
# Builds kube-apiserver, kubectl and etcd from the nested module test/controlplane
# into a cache directory outside the repository, keyed on that module's go.mod and
# go.sum, and prints the directory. A cache hit costs a hash and a stat.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mod="${root}/test/controlplane"
key="$(cat "${mod}/go.mod" "${mod}/go.sum" "${mod}/cmd/etcd/main.go" | sha256sum | cut -c1-16)"
cache="${COZY_HEALTH_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/cozy-health}"
dir="${cache}/testbin/${key}"

if [[ -x "${dir}/kube-apiserver" && -x "${dir}/kubectl" && -x "${dir}/etcd" ]]; then
	echo "${dir}"
	exit 0
fi

# Another process building the same key is waited for (flock), never raced.
mkdir -p "$(dirname "${dir}")"
exec 9>"${dir}.lock"
flock 9
if [[ -x "${dir}/kube-apiserver" && -x "${dir}/kubectl" && -x "${dir}/etcd" ]]; then
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

echo "testbin: building kube-apiserver, kubectl, etcd ${kv} into ${dir} (first time takes ~10 min on 2 cores)" >&2
start=$(date +%s)
(
	cd "${mod}"
	CGO_ENABLED=0 go build -trimpath -ldflags "${ldflags}" -o "${tmp}/" \
		k8s.io/kubernetes/cmd/kube-apiserver \
		k8s.io/kubernetes/cmd/kubectl \
		./cmd/etcd
)
mv "${tmp}" "${dir}"
trap - EXIT
echo "testbin: built in $(( $(date +%s) - start ))s" >&2
echo "${dir}"

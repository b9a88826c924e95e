#!/usr/bin/env bash
# Prints the directory of one set of test binaries, building it on a miss:
#
#   hack/tooldir.sh NAME        NAME: testbin, nodebin, promtool, vmalert, flux,
#                               cosign, syft, krew, actionlint
#
# hack/tools/NAME.sh is the set's manifest: key_files (what its cache key
# hashes: the nested module's go.mod and go.sum, and any main.go of ours),
# bins (the executables a complete directory holds), first_time (what a cold
# build costs) and build DIR (builds them into DIR, in a subshell). The
# directory is ${COZY_HEALTH_CACHE:-~/.cache/cozy-health}/NAME/KEY, outside
# the repository; a hit costs a hash and a stat. Another process building the
# same key is waited for (flock), never raced. The Go side is harness.Tool.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
name="${1:?usage: hack/tooldir.sh NAME (a manifest in hack/tools/)}"
manifest="${root}/hack/tools/${name}.sh"
if [[ ! -f "${manifest}" ]]; then
	echo "tooldir: no manifest ${manifest}" >&2
	exit 2
fi

# k8s_ldflags VERSION: the linker flags that stamp a Kubernetes binary with
# its version, as the upstream release build does.
k8s_ldflags() {
	local v="$1" minor flags="-s -w" pkg
	minor="${v#v1.}"
	minor="${minor%%.*}"
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		flags+=" -X ${pkg}.gitVersion=${v} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor} -X ${pkg}.gitTreeState=clean"
	done
	echo "${flags}"
}

# shellcheck source=/dev/null
source "${manifest}"

key="$(cd "${root}" && cat "${key_files[@]}" | sha256sum | cut -c1-16)"
cache="${COZY_HEALTH_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/cozy-health}"
dir="${cache}/${name}/${key}"

complete() {
	local b
	for b in "${bins[@]}"; do [[ -x "${dir}/${b}" ]] || return 1; done
}

if complete; then
	echo "${dir}"
	exit 0
fi

mkdir -p "${cache}/${name}"
exec 9>"${dir}.lock"
flock 9
if complete; then
	echo "${dir}"
	exit 0
fi

tmp="${dir}.tmp.$$"
mkdir -p "${tmp}"
trap 'rm -rf "${tmp}"' EXIT

echo "${name}: building ${bins[*]} into ${dir} (${first_time})" >&2
start=$(date +%s)
(cd "${root}" && build "${tmp}")
mv "${tmp}" "${dir}"
trap - EXIT
echo "${name}: built in $(( $(date +%s) - start ))s" >&2
echo "${dir}"

#!/usr/bin/env bash
# Builds Prometheus's promtool from the nested module test/promtool into a
# cache directory outside the repository, keyed on that module's go.mod and
# go.sum, and prints the binary's path. The service-discovery plugins are left
# out (build tag remove_all_sd): the rule tests need none, and without them the
# build pulls in no cloud SDKs. A cache hit costs a hash and a stat.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mod="${root}/test/promtool"
key="$(cat "${mod}/go.mod" "${mod}/go.sum" | sha256sum | cut -c1-16)"
cache="${COZY_HEALTH_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/cozy-health}"
dir="${cache}/promtool/${key}"

if [[ -x "${dir}/promtool" ]]; then
	echo "${dir}/promtool"
	exit 0
fi

# Another process building the same key is waited for (flock), never raced.
mkdir -p "$(dirname "${dir}")"
exec 9>"${dir}.lock"
flock 9
if [[ -x "${dir}/promtool" ]]; then
	echo "${dir}/promtool"
	exit 0
fi

tmp="${dir}.tmp.$$"
mkdir -p "${tmp}"
trap 'rm -rf "${tmp}"' EXIT

echo "promtool: building into ${dir} (first time takes a few minutes on 2 cores)" >&2
start=$(date +%s)
(
	cd "${mod}"
	CGO_ENABLED=0 go build -trimpath -tags remove_all_sd -ldflags "-s -w" -o "${tmp}/promtool" \
		github.com/prometheus/prometheus/cmd/promtool
)
mv "${tmp}" "${dir}"
trap - EXIT
echo "promtool: built in $(( $(date +%s) - start ))s" >&2
echo "${dir}/promtool"

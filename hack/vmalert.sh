#!/usr/bin/env bash
# Builds VictoriaMetrics's vmalert and victoria-metrics (single-node) from the
# nested module test/vmalert into a cache directory outside the repository,
# keyed on that module's go.mod and go.sum, and prints the directory. The alert
# evaluation test (test/monitoring) evaluates the shipped rules with them as
# Cozystack's VictoriaMetrics does. A cache hit costs a hash and a stat.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mod="${root}/test/vmalert"
key="$(cat "${mod}/go.mod" "${mod}/go.sum" | sha256sum | cut -c1-16)"
cache="${COZY_HEALTH_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/cozy-health}"
dir="${cache}/vmalert/${key}"

if [[ -x "${dir}/vmalert" && -x "${dir}/victoria-metrics" ]]; then
	echo "${dir}"
	exit 0
fi

# Another process building the same key is waited for (flock), never raced.
mkdir -p "$(dirname "${dir}")"
exec 9>"${dir}.lock"
flock 9
if [[ -x "${dir}/vmalert" && -x "${dir}/victoria-metrics" ]]; then
	echo "${dir}"
	exit 0
fi

tmp="${dir}.tmp.$$"
mkdir -p "${tmp}"
trap 'rm -rf "${tmp}"' EXIT

echo "vmalert: building vmalert and victoria-metrics into ${dir} (first time takes a few minutes on 2 cores)" >&2
start=$(date +%s)
(
	cd "${mod}"
	for app in vmalert victoria-metrics; do
		CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "${tmp}/${app}" \
			"github.com/VictoriaMetrics/VictoriaMetrics/app/${app}"
	done
)
mv "${tmp}" "${dir}"
trap - EXIT
echo "vmalert: built in $(( $(date +%s) - start ))s" >&2
echo "${dir}"

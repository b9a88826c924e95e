#!/usr/bin/env bash
# Builds Flux's source-controller and helm-controller from the nested modules
# test/flux/{sourcecontroller,helmcontroller} (one each: their replace
# directives differ) into a cache directory outside the repository, keyed on
# those modules' go.mod and go.sum, and prints the directory. The Flux test
# (test/flux) runs them against the harness apiserver. A cache hit costs a
# hash and a stat.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mods="${root}/test/flux"
key="$(cat "${mods}"/sourcecontroller/go.{mod,sum} "${mods}"/helmcontroller/go.{mod,sum} | sha256sum | cut -c1-16)"
cache="${COZY_HEALTH_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/cozy-health}"
dir="${cache}/flux/${key}"

if [[ -x "${dir}/source-controller" && -x "${dir}/helm-controller" ]]; then
	echo "${dir}"
	exit 0
fi

# Another process building the same key is waited for (flock), never raced.
mkdir -p "$(dirname "${dir}")"
exec 9>"${dir}.lock"
flock 9
if [[ -x "${dir}/source-controller" && -x "${dir}/helm-controller" ]]; then
	echo "${dir}"
	exit 0
fi

tmp="${dir}.tmp.$$"
mkdir -p "${tmp}"
trap 'rm -rf "${tmp}"' EXIT

echo "flux: building source-controller and helm-controller into ${dir} (first time takes several minutes on 2 cores)" >&2
start=$(date +%s)
(cd "${mods}/sourcecontroller" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "${tmp}/source-controller" github.com/fluxcd/source-controller)
(cd "${mods}/helmcontroller" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "${tmp}/helm-controller" github.com/fluxcd/helm-controller)
# The CRDs the controllers serve, from the same module versions.
mkdir -p "${tmp}/crds"
for c in source helm; do
	src="$(cd "${mods}/${c}controller" && go list -m -f '{{.Dir}}' "github.com/fluxcd/${c}-controller")"
	cp "${src}"/config/crd/bases/*.yaml "${tmp}/crds/"
done
chmod -R u+w "${tmp}"
mv "${tmp}" "${dir}"
trap - EXIT
echo "flux: built in $(( $(date +%s) - start ))s" >&2
echo "${dir}"

#!/usr/bin/env bash
# Fails when a generated file differs from what `make generate` produces.
# It generates into a temporary copy of the working tree (tracked and
# untracked files, not ignored ones) and compares; the working tree itself is
# never written, so an interrupted run (a cold buf build is slow) leaves it
# as it was.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
paths=(pkg/apis pkg/applyconfiguration pkg/client deploy/crds deploy/charts/cozy-health/crds deploy/manifests deploy/charts/cozy-health/files/adapter-rbac.yaml deploy/cozystack/dashboards deploy/cozystack/snippets proto
	docs/reference/flags.md docs/reference/metrics.md docs/reference/values.md
	test/fixtures/generated aggregator/internal/adapters/cnpg/testdata aggregator/internal/adapters/velero/testdata aggregator/internal/adapters/kamaji/testdata)
tmp="$(mktemp -d "${TMPDIR:-/tmp}/cozy-health-verify-generate.XXXXXX")"
trap 'rm -rf "${tmp}"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
# Files deleted in the working tree but still in the index are left out.
git ls-files -z --cached --others --exclude-standard |
	while IFS= read -r -d '' f; do [[ -e ${f} ]] && printf '%s\0' "${f}"; done |
	tar -c --null -T - -f - | tar -x -C "${tmp}" -f -
bash "${tmp}/hack/generate.sh"
status=0
for p in "${paths[@]}"; do
	if ! diff -r "$p" "${tmp}/$p"; then status=1; fi
done
if [[ ${status} -ne 0 ]]; then
	echo "verify-generate: generated files drifted (< working tree, > generated); run 'make generate' and commit the result" >&2
	exit 1
fi
echo "verify-generate: generated files are up to date"

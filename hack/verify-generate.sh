#!/usr/bin/env bash
# Fails when a generated file differs from what `make generate` produces.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
paths=(pkg/apis pkg/applyconfiguration pkg/client deploy/crds deploy/charts/cozy-health/crds deploy/manifests proto
	test/fixtures/generated aggregator/internal/adapters/cnpg/testdata aggregator/internal/adapters/velero/testdata aggregator/internal/adapters/kamaji/testdata)
tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT
for p in "${paths[@]}"; do mkdir -p "${tmp}/$(dirname "$p")"; cp -a "$p" "${tmp}/$p"; done
bash hack/generate.sh
status=0
for p in "${paths[@]}"; do
	if ! diff -r "${tmp}/$p" "$p"; then status=1; fi
done
if [[ ${status} -ne 0 ]]; then
	echo "verify-generate: generated files drifted; run 'make generate' and commit the result" >&2
	exit 1
fi
echo "verify-generate: generated files are up to date"

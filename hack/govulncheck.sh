#!/usr/bin/env bash
# Runs govulncheck (pinned in go.mod's tool block) over what ships: the
# agent, the aggregator and kubectl-health, each built as `make build` and
# the images build them (CGO_ENABLED=0, -trimpath, -s -w), then scanned in
# binary mode. A binary's module graph is exactly what it links, so the
# tool block's modules (buf, govulncheck itself, the code generators) and
# the test-only ones are not in it, as they are in `govulncheck ./...`'s
# source scan of the whole module graph.
#
# Where the vulnerability database (vuln.go.dev, or $GOVULNDB) cannot be
# reached, as on a machine that only reaches the Go module proxy, it says so
# and skips: an unreachable database is not a finding. Any other failure, a
# vulnerability found in any binary included, fails.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

# The shipped binaries: name and package.
shipped=(
	"cozy-health-agent ./agent"
	"cozy-health-aggregator ./aggregator"
	"kubectl-health ./cmd/kubectl-health"
)
db=()
if [[ -n "${GOVULNDB:-}" ]]; then
	db=(-db "${GOVULNDB}")
fi

failed=0
for entry in "${shipped[@]}"; do
	read -r name pkg <<<"${entry}"
	bin="${work}/${name}"
	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "${bin}" "${pkg}"
	out="${work}/${name}.out"
	if go tool govulncheck "${db[@]}" -mode=binary "${bin}" >"${out}" 2>&1; then
		echo "govulncheck: ${name} (${pkg}):"
		cat "${out}"
		continue
	fi
	if grep -q '^govulncheck: fetching vulnerabilities' "${out}"; then
		echo "govulncheck: SKIPPED: the vulnerability database ${GOVULNDB:-https://vuln.go.dev} is unreachable from here:" >&2
		grep '^govulncheck: fetching vulnerabilities' "${out}" >&2
		exit 0
	fi
	echo "govulncheck: ${name} (${pkg}) FAILED:"
	cat "${out}"
	failed=1
done
exit "${failed}"

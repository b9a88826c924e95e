#!/usr/bin/env bash
# buf breaking: proto/ must stay wire- and source-compatible (buf.yaml's
# breaking rules, FILE) with the previous release's proto, so agents and
# aggregators of adjacent releases understand each other during a rollout.
#
# The previous release is the newest v* tag merged into HEAD that does not
# point at HEAD itself (on a release tag, the one before it); while there is
# none, the commit in hack/release-baseline. Its proto/ is taken with git
# archive, so any full clone works (a shallow one is told to fetch history).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"

base=""
here="$(git tag --points-at HEAD 2>/dev/null || true)"
while read -r tag; do
	[[ -z "${tag}" ]] && continue
	if ! grep -qxF -- "${tag}" <<<"${here}"; then
		base="${tag}"
		break
	fi
done < <(git tag --merged HEAD --list 'v*' --sort=-v:refname)
what="tag ${base}"
if [[ -z "${base}" ]]; then
	base="$(grep -v '^[[:space:]]*#' hack/release-baseline | grep -m1 -E '^[0-9a-f]{7,40}$' || true)"
	if [[ -z "${base}" ]]; then
		echo "buf-breaking: no v* tag and no commit in hack/release-baseline" >&2
		exit 1
	fi
	what="baseline ${base:0:12} (hack/release-baseline; no earlier v* tag)"
fi
if ! git cat-file -e "${base}^{commit}" 2>/dev/null; then
	echo "buf-breaking: ${what} is not in this clone (shallow? git fetch --unshallow --tags)" >&2
	exit 1
fi

tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT
git archive "${base}" proto | tar -x -C "${tmp}"
echo "buf breaking proto/ against ${what}"
cd proto
go tool buf breaking --against "${tmp}/proto"

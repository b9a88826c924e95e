#!/usr/bin/env bash
# Installs the Debian packages `make test` runs (upstream software, never a
# fake): the real node's container runtime, CNI plugins, nftables and
# iproute2 (test/harness), real OVN / Open vSwitch (test/ovnreal) and the
# alert rules' evaluators (prometheus, prometheus-alertmanager). The tests
# start every daemon themselves, so the packages' services must not start on
# install: a policy-rc.d refusing them is put in place for the install when
# the machine has none.
#
# Idempotent and fast when everything is there (one dpkg query, no apt).
# Without root or apt it installs nothing and fails at once naming the one
# command to run. `make test` (and so .ci/run) calls it first.
set -euo pipefail

pkgs=(containerd runc containernetworking-plugins nftables iproute2 ovn-central ovn-host openvswitch-switch prometheus prometheus-alertmanager)

missing=()
if command -v dpkg-query >/dev/null 2>&1; then
	installed="$(dpkg-query -W -f '${Package} ${db:Status-Abbrev}\n' "${pkgs[@]}" 2>/dev/null || true)"
	for p in "${pkgs[@]}"; do
		grep -q "^${p} ii" <<<"${installed}" || missing+=("${p}")
	done
else
	missing=("${pkgs[@]}")
fi
((${#missing[@]})) || exit 0

if ! command -v apt-get >/dev/null 2>&1; then
	echo "testdeps: make test needs ${missing[*]} (Debian package names) and this machine has no apt-get; install them, then run make test again" >&2
	exit 1
fi
if [[ $(id -u) -ne 0 ]]; then
	echo "testdeps: make test needs ${missing[*]}; run once as root: sudo bash hack/testdeps.sh" >&2
	exit 1
fi

echo "testdeps: installing ${missing[*]} for the tests" >&2
policy=/usr/sbin/policy-rc.d
if [[ ! -e ${policy} ]]; then
	printf '#!/bin/sh\nexit 101\n' >"${policy}"
	chmod +x "${policy}"
	trap 'rm -f "${policy}"' EXIT
fi
apt-get update -q
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"

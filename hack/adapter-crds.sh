#!/usr/bin/env bash
# Refreshes the CustomResourceDefinitions the cluster adapters' tests and the
# lab install (test/crds/adapters), from the YAML each project ships in its
# Go module, fetched through the Go module proxy, descriptions stripped.
# Cozystack's own CRDs and etcd-operator's are not on the module proxy: their
# files here (cozystack.io_*, backups.cozystack.io_*, etcd.aenix.io_*) are
# written by hand from the projects' Go API types and are left alone.
set -euo pipefail
cd "$(dirname "$0")/.."
out=test/crds/adapters
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fetch() {
	local mod=$1
	shift
	local dir
	dir=$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "$mod" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	if [[ -z "$dir" ]]; then
		echo "adapter-crds: cannot download $mod" >&2
		exit 1
	fi
	for f in "$@"; do
		{
			echo "# Origin: $mod, $f (descriptions stripped by hack/crdstrip)."
			go run ./hack/crdstrip "$dir/$f"
		} >"$out/$(basename "$f")"
	done
}

fetch github.com/fluxcd/helm-controller@v1.6.3 config/crd/bases/helm.toolkit.fluxcd.io_helmreleases.yaml
fetch github.com/cloudnative-pg/cloudnative-pg@v1.28.2 \
	config/crd/bases/postgresql.cnpg.io_clusters.yaml \
	config/crd/bases/postgresql.cnpg.io_backups.yaml \
	config/crd/bases/postgresql.cnpg.io_scheduledbackups.yaml
fetch github.com/cloudnative-pg/plugin-barman-cloud@v0.13.0 config/crd/bases/barmancloud.cnpg.io_objectstores.yaml
fetch github.com/clastix/kamaji@v1.0.0 \
	config/crd/bases/kamaji.clastix.io_tenantcontrolplanes.yaml \
	config/crd/bases/kamaji.clastix.io_datastores.yaml
fetch github.com/vmware-tanzu/velero@v1.18.3 \
	config/crd/v1/bases/velero.io_backups.yaml \
	config/crd/v1/bases/velero.io_schedules.yaml

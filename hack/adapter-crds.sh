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
	dir=$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "$mod" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p') || true
	if [[ -z "$dir" ]]; then
		if [[ -n "${KEEP_IF_UNAVAILABLE:-}" ]]; then
			echo "adapter-crds: $mod is not on the module proxy; its files here are kept" >&2
			return 0
		fi
		echo "adapter-crds: cannot download $mod" >&2
		exit 1
	fi
	for spec in "$@"; do
		# FILE or FILE=OUTPUT-NAME (two versions of one CRD side by side).
		local f=${spec%%=*} name
		name=$(basename "$f")
		[[ "$spec" == *=* ]] && name=${spec#*=}
		{
			echo "# Origin: $mod, $f (descriptions stripped by hack/crdstrip)."
			[[ -n "${NOTE:-}" ]] && echo "# $NOTE"
			go run ./hack/crdstrip "$dir/$f"
		} >"$out/$name"
	done
}

fetch github.com/fluxcd/helm-controller@v1.6.3 config/crd/bases/helm.toolkit.fluxcd.io_helmreleases.yaml
fetch github.com/cloudnative-pg/cloudnative-pg@v1.28.2 \
	config/crd/bases/postgresql.cnpg.io_clusters.yaml \
	config/crd/bases/postgresql.cnpg.io_backups.yaml \
	config/crd/bases/postgresql.cnpg.io_scheduledbackups.yaml
fetch github.com/cloudnative-pg/plugin-barman-cloud@v0.13.0 config/crd/bases/barmancloud.cnpg.io_objectstores.yaml
# Kamaji: the version Cozystack ships (its packages/system/kamaji image builds
# tag 26.3.6-edge, commit e51909fa; DataStore status.ready exists since
# 26.3.2-edge) and v1.0.0's DataStore, which has no status.ready.
# The proxy stopped serving that commit (403); the files fetched from it
# are kept when it cannot be downloaded.
KEEP_IF_UNAVAILABLE=1 NOTE="Kamaji 26.3.6-edge, the version Cozystack ships (cozystack@3c780acd packages/system/kamaji/images/kamaji/Dockerfile); DataStore status.ready is required." \
	fetch github.com/clastix/kamaji@e51909fae3f5221b14c83413aaa5df07b64d3336 \
	charts/kamaji/crds/kamaji.clastix.io_tenantcontrolplanes.yaml \
	charts/kamaji/crds/kamaji.clastix.io_datastores.yaml
NOTE="Kamaji v1.0.0 (the only Kamaji the module proxy serves; test/fixtures marshals its types): DataStoreStatus has usedBy only, no ready (the apiserver prunes a written status.ready)." \
	fetch github.com/clastix/kamaji@v1.0.0 \
	config/crd/bases/kamaji.clastix.io_datastores.yaml=kamaji.clastix.io_datastores-v1.0.0.yaml \
	config/crd/bases/kamaji.clastix.io_tenantcontrolplanes.yaml=kamaji.clastix.io_tenantcontrolplanes-v1.0.0.yaml
# velero as Cozystack ships it (packages/system/velero image v1.18.1).
fetch github.com/vmware-tanzu/velero@v1.18.1 \
	config/crd/v1/bases/velero.io_backups.yaml \
	config/crd/v1/bases/velero.io_schedules.yaml
# The oldest supported releases (Cozystack v1.5.4 ships CloudNativePG 1.27.3,
# not on the module proxy: 1.27.4 is the nearest of its line; velero
# v1.17.0), beside the shipped ones: test/fixtures/oldest marshals their types.
fetch github.com/cloudnative-pg/cloudnative-pg@v1.27.4 \
	config/crd/bases/postgresql.cnpg.io_clusters.yaml=postgresql.cnpg.io_clusters-v1.27.4.yaml \
	config/crd/bases/postgresql.cnpg.io_backups.yaml=postgresql.cnpg.io_backups-v1.27.4.yaml \
	config/crd/bases/postgresql.cnpg.io_scheduledbackups.yaml=postgresql.cnpg.io_scheduledbackups-v1.27.4.yaml
fetch github.com/vmware-tanzu/velero@v1.17.0 \
	config/crd/v1/bases/velero.io_backups.yaml=velero.io_backups-v1.17.0.yaml \
	config/crd/v1/bases/velero.io_schedules.yaml=velero.io_schedules-v1.17.0.yaml

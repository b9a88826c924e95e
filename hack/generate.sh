#!/usr/bin/env bash
# Regenerates every generated file with the tools pinned in go.mod's tool block:
# deepcopy, applyconfigurations and the CRD (controller-gen), the typed clientset
# (client-gen), and the protobuf/gRPC Go code (buf with protoc-gen-go and
# protoc-gen-go-grpc), the chart's copy of the CRD and the plain manifests
# rendered from the chart, the adapters' RBAC rules, the reference pages
# generated from the code (docs/reference: flags, metrics, chart values), and
# the cluster adapters' upstream-typed fixtures (test/fixtures).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

header=hack/boilerplate.go.txt

rm -rf pkg/applyconfiguration pkg/client deploy/crds
go tool controller-gen \
	object:headerFile="${header}" \
	applyconfiguration:headerFile="${header}" \
	crd:crdVersions=v1 output:crd:dir=deploy/crds \
	paths=./pkg/apis/...
# The chart ships the same CRD (Helm installs crds/ before the templates).
cp deploy/crds/*.yaml deploy/charts/cozy-health/crds/

go tool client-gen \
	--go-header-file "${header}" \
	--input-base github.com/cozystack/cozy-health/pkg/apis \
	--input health/v1alpha1 \
	--output-dir pkg/client/clientset \
	--output-pkg github.com/cozystack/cozy-health/pkg/client/clientset \
	--clientset-name versioned \
	--fake-clientset=false \
	--apply-configuration-package github.com/cozystack/cozy-health/pkg/applyconfiguration

find proto -name '*.pb.go' -delete
(cd proto && go tool buf lint && go tool buf generate)

# The aggregator's read-only RBAC for the cluster adapters' sources, from
# the adapters' table (the chart's ClusterRole includes it).
go run ./aggregator/internal/adapters/cmd/adapter-rbac

# Plain manifests rendered from the chart (make manifests).
go run ./hack/manifests

# The reference pages read from the code: every flag of both binaries and
# the plugin, every metric they register, every chart value with its
# comment (docs/reference/flags.md, metrics.md, values.md).
go run ./hack/reference

# The cluster adapters' fixtures marshalled from the upstream projects' Go
# types (CNPG, velero, Kamaji): test-only modules, at the versions Cozystack
# ships (test/fixtures) and the oldest supported (test/fixtures/oldest).
(cd test/fixtures && go run . ../..)
(cd test/fixtures/oldest && go run . ../../..)

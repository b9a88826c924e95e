# cozy-health — `make help` lists the targets.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/cozystack/cozy-health/pkg/version.Version=$(VERSION)
BIN := bin
GO_TEST_FLAGS ?= -timeout 30m
# The directories of the test binaries, each built once from the Go module
# proxy and cached outside the repo by hack/tooldir.sh NAME (manifests in
# hack/tools/; a test reads $COZY_HEALTH_<NAME>, or runs the script itself):
# kube-apiserver, kubectl and etcd;
TESTBIN = $(shell bash hack/tooldir.sh testbin)
# kubelet, kube-proxy, kube-controller-manager, kube-scheduler and CoreDNS for
# the test node;
NODEBIN = $(shell bash hack/tooldir.sh nodebin)
# promtool for the alert rules' unit tests;
PROMTOOL = $(shell bash hack/tooldir.sh promtool)
# vmalert and victoria-metrics single for the alert evaluation test;
VMALERT = $(shell bash hack/tooldir.sh vmalert)
# Flux's source-controller and helm-controller (and their CRDs) for the
# HelmRelease adapter's test on the real controllers.
FLUX = $(shell bash hack/tooldir.sh flux)
# cosign, syft, and krew's validate-krew-manifest and kubectl-krew for the
# release's signatures, SBOMs and krew manifest (hack/sign, hack/krew and
# their test, test/signing); actionlint for `make lint`.
COSIGN = $(shell bash hack/tooldir.sh cosign)
SYFT = $(shell bash hack/tooldir.sh syft)
KREW = $(shell bash hack/tooldir.sh krew)
ACTIONLINT = $(shell bash hack/tooldir.sh actionlint)
# Where `make push` publishes the images, REGISTRY/NAME:IMAGE_TAG: Cozystack's
# image path by default (its hack/common-envs.mk). IMAGE_TAG: default the
# chart's appVersion. PUSH=0 writes the values without pushing.
REGISTRY ?= ghcr.io/cozystack/cozystack
IMAGE_TAG ?=
PUSH ?= 1
# PULL_SECRET: for `make release` into a private registry, the docker-registry
# Secret the written Flux objects and the chart name (docs/release.md).
PULL_SECRET ?=
# The values files `make push` pins the references in (FILE=KEY-PREFIX).
PUSH_VALUES ?= deploy/charts/cozy-health/values.yaml deploy/cozystack/packages/system/cozy-health/values.yaml=cozy-health.

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build cozy-health-agent, cozy-health-aggregator, kubectl-health and cozy-health-lab into bin/.
	@mkdir -p $(BIN)
	CGO_ENABLED=0 go build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/cozy-health-agent ./agent
	CGO_ENABLED=0 go build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/cozy-health-aggregator ./aggregator
	CGO_ENABLED=0 go build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/kubectl-health ./cmd/kubectl-health
	CGO_ENABLED=0 go build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/cozy-health-lab ./test/lab/cmd/cozy-health-lab

.PHONY: image
image: ## OCI images of the agent and aggregator (linux/amd64+arm64, no Docker) as archives in bin/images; prints sizes and digests.
	go run ./hack/image -out $(BIN)/images -version $(VERSION) -registry $(REGISTRY) $(if $(IMAGE_TAG),-tag $(IMAGE_TAG))

.PHONY: push
push: image ## Push both images (whole amd64+arm64 index, digests kept) to REGISTRY (ghcr.io/cozystack/cozystack), pin REGISTRY/NAME:TAG@DIGEST in the chart and package values, render deploy/manifests and the reference pages (docs/reference/values.md names the images).
	go run ./hack/image push -in $(BIN)/images -registry $(REGISTRY) $(if $(IMAGE_TAG),-tag $(IMAGE_TAG)) $(foreach v,$(PUSH_VALUES),-values $(v)) $(if $(filter 0,$(PUSH)),-dry-run)
	go run ./hack/manifests
	go run ./hack/reference

.PHONY: release
release: image ## One release into REGISTRY at VERSION: images, chart (OCI), Cozystack package (Flux OCI artifact), the Flux objects a user applies, signatures, SBOMs and the krew manifest, in bin/release/VERSION.
	go run ./hack/release -in $(BIN)/images -registry $(REGISTRY) -version $(VERSION) -out $(BIN)/release/$(VERSION) $(if $(PULL_SECRET),-pull-secret $(PULL_SECRET))
	go run ./hack/sign -release $(BIN)/release/$(VERSION)/release.json $(if $(COSIGN_KEY),-key $(COSIGN_KEY))
	go run ./hack/krew -version $(VERSION) -out $(BIN)/release/$(VERSION)

.PHONY: testbin
testbin: ## Build (once, cached outside the repo) kube-apiserver, kubectl and etcd v1.37.2 for tests.
	@bash hack/tooldir.sh testbin

.PHONY: promtool
promtool: ## Build (once, cached outside the repo) Prometheus's promtool for the alert rules' tests.
	@bash hack/tooldir.sh promtool

.PHONY: vmalert
vmalert: ## Build (once, cached outside the repo) VictoriaMetrics's vmalert and victoria-metrics single for the alert evaluation test.
	@bash hack/tooldir.sh vmalert

.PHONY: flux
flux: ## Build (once, cached outside the repo) Flux's source-controller v1.7.3 and helm-controller v1.4.3 for the HelmRelease adapter's test.
	@bash hack/tooldir.sh flux

.PHONY: cosign syft krew
cosign: ## Build (once, cached outside the repo) Sigstore's cosign v3.1.3 for signing releases and verifying them.
	@bash hack/tooldir.sh cosign
syft: ## Build (once, cached outside the repo) Anchore's syft v1.57.2 for the release's SPDX SBOMs.
	@bash hack/tooldir.sh syft
krew: ## Build (once, cached outside the repo) krew v0.4.3's validate-krew-manifest and kubectl-krew.
	@bash hack/tooldir.sh krew

.PHONY: nodebin
nodebin: testbin ## Build (once, cached outside the repo) kubelet, kube-proxy, kube-controller-manager, kube-scheduler v1.37.2 and CoreDNS for the test node.
	@bash hack/tooldir.sh nodebin

.PHONY: testdeps
testdeps: ## Install (as root, with apt; fast when already there) the Debian packages make test runs, or fail naming the command.
	@bash hack/testdeps.sh

.PHONY: test
test: testdeps testbin nodebin promtool vmalert flux cosign syft krew build image ## Run every test: unit, integration on a real kube-apiserver + etcd, e2e on a real kubelet node (with the images `make image` ships), alert rules.
	COZY_HEALTH_TESTBIN="$(TESTBIN)" COZY_HEALTH_NODEBIN="$(NODEBIN)" COZY_HEALTH_PROMTOOL="$(PROMTOOL)" COZY_HEALTH_VMALERT="$(VMALERT)" COZY_HEALTH_FLUX="$(FLUX)" COZY_HEALTH_COSIGN="$(COSIGN)" COZY_HEALTH_SYFT="$(SYFT)" COZY_HEALTH_KREW="$(KREW)" COZY_HEALTH_BIN="$(CURDIR)/$(BIN)" COZY_HEALTH_IMAGES="$(CURDIR)/$(BIN)/images" go test $(GO_TEST_FLAGS) ./...

.PHONY: alerts-timing
alerts-timing: testbin vmalert build ## Measure every alert of the fault matrix on Debian's prometheus and on vmalert + victoria-metrics, with the shipped rules, `for` and intervals (~25 min; not in make test).
	COZY_HEALTH_TESTBIN="$(TESTBIN)" COZY_HEALTH_VMALERT="$(VMALERT)" COZY_HEALTH_BIN="$(CURDIR)/$(BIN)" go test -tags alerttiming -count=1 -timeout 60m -v -run 'TestAlertTiming$$' ./test/monitoring/

.PHONY: test-unit
test-unit: ## The inner loop: every test that needs no apiserver, etcd, kubelet node or built binary (go test -short).
	COZY_HEALTH_TESTBIN=/nonexistent/test-unit-starts-no-control-plane COZY_HEALTH_BIN=/nonexistent/test-unit-runs-no-built-binary go test -short $(GO_TEST_FLAGS) ./...

.PHONY: generate
generate: ## Regenerate deepcopy, applyconfigurations, clientset, CRD and protobuf code, the adapters' RBAC rules (chart files/adapter-rbac.yaml), the rendered manifests, the reference pages read from the code (docs/reference: flags, metrics, chart values), and the adapters' upstream-typed fixtures (test/fixtures).
	bash hack/generate.sh

.PHONY: manifests
manifests: ## Render the Helm chart into deploy/manifests (plain manifests for kubectl apply, the Talos ServiceAccount apart) and the copies deploy/cozystack takes (dashboard, kube-state-metrics entry).
	go run ./hack/manifests

.PHONY: verify-generate
verify-generate: ## Fail when generated code drifted from its sources.
	bash hack/verify-generate.sh

.PHONY: lint
lint: ## gofmt, go vet, buf lint, buf breaking against the previous release's proto, actionlint on .github/workflows and govulncheck (skipped, saying so, where its database is unreachable).
	@out="$$(gofmt -l $$(git ls-files '*.go' | grep -v '^test/controlplane/') 2>&1)"; if [[ -n "$$out" ]]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet ./...
	cd proto && go tool buf lint
	bash hack/buf-breaking.sh
	"$(ACTIONLINT)/actionlint" .github/workflows/*.yaml
	bash hack/govulncheck.sh

.PHONY: demo
demo: build testbin ## Start a 3-node local lab, inject faults, show Health objects react, tear down.
	COZY_HEALTH_TESTBIN="$(TESTBIN)" $(BIN)/cozy-health-lab demo --nodes 3 --dir "$${LAB_DIR:-$$(mktemp -d /tmp/cozy-health-demo.XXXXXX)}"

.PHONY: lab
lab: build testbin ## Start a 3-node local lab and leave it running (LAB_DIR=.lab by default).
	COZY_HEALTH_TESTBIN="$(TESTBIN)" $(BIN)/cozy-health-lab up --nodes 3 --dir "$${LAB_DIR:-$(CURDIR)/.lab}"

.PHONY: lab-node
lab-node: build testbin nodebin ## A control plane with one real kubelet node, the chart installed on it with Helm, left running (root; LAB_DIR=.lab-node by default).
	COZY_HEALTH_TESTBIN="$(TESTBIN)" COZY_HEALTH_NODEBIN="$(NODEBIN)" $(BIN)/cozy-health-lab up-node --chart-bin "$(CURDIR)/$(BIN)" --dir "$${LAB_DIR:-$(CURDIR)/.lab-node}"

.PHONY: soak
soak: build testbin ## Soak: a 3-node lab under a seeded fault schedule for SOAK_MINUTES (20), seconds of false green/red per fault (SOAK_SEED, SOAK_ARGS); fails on a false green or a bound missed.
	COZY_HEALTH_TESTBIN="$(TESTBIN)" COZY_HEALTH_BIN="$(CURDIR)/$(BIN)" go run ./test/soak/cmd/cozy-health-soak --minutes "$${SOAK_MINUTES:-20}" --seed "$${SOAK_SEED:-1}" $${SOAK_ARGS:-}

# Where the bench-* targets tee their output (one <bench>.txt each), the
# aggregator's profiles (aggregator/nodes-N/) and `make bench`'s table.
BENCH_RESULTS ?= $(CURDIR)/$(BIN)/bench
# The node counts bench-aggregator runs at, one after the other.
BENCH_NODES ?= 1000,5000,10000
# How many times bench-aggregator runs at each node count (`make bench`: 2,
# both in its table with the load average each started at).
BENCH_RUNS ?= 1
# bench-faults: the node count and the aggregator replicas.
BENCH_FAULT_NODES ?= 10000
BENCH_FAULT_REPLICAS ?= 3
# The machine named above `make bench`'s table.
BENCH_MACHINE ?= $(shell nproc) cores ($(shell grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'); $(shell awk '/MemTotal/ {printf "%.0f GiB", $$2/1048576}' /proc/meminfo)), $(shell uname -sr)

.PHONY: bench
bench: ## Run every bench (drain, ingest, agent, aggregator twice at each BENCH_NODES, adapters, the aggregator under faults) and print the tables: figure, goal, measured (a column per run), ratio (also in bin/bench/table.md).
	mkdir -p "$(BENCH_RESULTS)"
	rm -f "$(BENCH_RESULTS)"/agent.txt "$(BENCH_RESULTS)"/ingest.txt "$(BENCH_RESULTS)"/aggregator.txt "$(BENCH_RESULTS)"/adapters.txt "$(BENCH_RESULTS)"/drain.txt "$(BENCH_RESULTS)"/faults.txt
	$(MAKE) bench-drain
	$(MAKE) bench-ingest
	$(MAKE) bench-agent
	$(MAKE) bench-aggregator BENCH_RUNS=2
	$(MAKE) bench-adapters
	$(MAKE) bench-faults
	go run ./test/bench/collect -dir "$(BENCH_RESULTS)" -machine "$(BENCH_MACHINE)"

.PHONY: bench-agent
bench-agent: build ## Measure agent RSS and CPU at a 5 s interval with every check enabled, streaming to 3 ingest servers, and its CPU by check (execution trace kept in bin/bench/agent/).
	mkdir -p "$(BENCH_RESULTS)"
	COZY_HEALTH_BENCH_PROFILE_DIR="$(BENCH_RESULTS)/agent" COZY_HEALTH_TESTBIN="$(TESTBIN)" COZY_HEALTH_BIN="$(CURDIR)/$(BIN)" go test -v -run '^$$' -bench . -benchtime 1x -timeout 20m ./test/bench/agent/ | tee "$(BENCH_RESULTS)/agent.txt"

.PHONY: bench-ingest
bench-ingest: ## Measure verified reports per second per core against bare ed25519 verify + decode.
	mkdir -p "$(BENCH_RESULTS)"
	go test -run '^$$' -bench . -benchmem ./aggregator/internal/ingest/ | tee "$(BENCH_RESULTS)/ingest.txt"

.PHONY: bench-aggregator
bench-aggregator: build testbin ## Simulated nodes (BENCH_NODES, default 1000,5000,10000; BENCH_RUNS runs each) through the real ingest path: CPU, RSS, writes/s, report -> Health, staleness per size and their growth, the load average before each run; CPU and heap profiles' top 15.
	mkdir -p "$(BENCH_RESULTS)/aggregator"
	BENCH_NODES="$(BENCH_NODES)" COZY_HEALTH_BENCH_PROFILE_DIR="$(BENCH_RESULTS)/aggregator" COZY_HEALTH_TESTBIN="$(TESTBIN)" COZY_HEALTH_BIN="$(CURDIR)/$(BIN)" go test -run '^$$' -bench '^BenchmarkAggregator$$' -benchtime 1x -count $(BENCH_RUNS) -timeout $$((90 * $(BENCH_RUNS)))m ./test/bench/aggregator/ | tee "$(BENCH_RESULTS)/aggregator.txt"
	go run ./test/bench/collect -dir "$(BENCH_RESULTS)" -only aggregator

.PHONY: bench-faults
bench-faults: build testbin ## The aggregator under faults (issue 40): BENCH_FAULT_NODES (10,000) agents streaming to BENCH_FAULT_REPLICAS (3) replicas; 10 % flap, 5 % go silent at once, the Lease holder is SIGKILLed: silent -> Unknown, worsening -> Health, lost writes, writes/s, largest object.
	mkdir -p "$(BENCH_RESULTS)"
	BENCH_FAULT_NODES="$(BENCH_FAULT_NODES)" BENCH_FAULT_REPLICAS="$(BENCH_FAULT_REPLICAS)" COZY_HEALTH_TESTBIN="$(TESTBIN)" COZY_HEALTH_BIN="$(CURDIR)/$(BIN)" go test -run '^$$' -bench '^BenchmarkAggregatorFaults$$' -benchtime 1x -timeout 60m ./test/bench/aggregator/ | tee "$(BENCH_RESULTS)/faults.txt"
	go run ./test/bench/collect -dir "$(BENCH_RESULTS)" -only faults

.PHONY: bench-lab
bench-lab: build testbin ## Start and stop the lab COZY_HEALTH_BENCH_LAB_RUNS times (default 20, 1-3 nodes) and count failed starts.
	COZY_HEALTH_TESTBIN="$(TESTBIN)" COZY_HEALTH_BIN="$(CURDIR)/$(BIN)" go test -run '^$$' -bench BenchmarkLabUpDown -benchtime 1x -timeout 120m ./test/lab/

.PHONY: bench-adapters
bench-adapters: build testbin ## 5,000 HelmReleases and 2,000 CNPG Clusters: adapter memory and CPU per 1,000 objects, status change -> Health p50/p99.
	mkdir -p "$(BENCH_RESULTS)"
	COZY_HEALTH_TESTBIN="$(TESTBIN)" COZY_HEALTH_BIN="$(CURDIR)/$(BIN)" go test -run '^$$' -bench . -benchtime 1x -timeout 30m ./test/bench/adapters/ | tee "$(BENCH_RESULTS)/adapters.txt"

.PHONY: bench-drain
bench-drain: ## drain-check latency with 5,000 simulated nodes (the rules: drain; the Service and its front ends: drainserver).
	mkdir -p "$(BENCH_RESULTS)"
	go test -run '^$$' -bench . -benchmem ./aggregator/internal/drain/ ./aggregator/internal/drainserver/ | tee "$(BENCH_RESULTS)/drain.txt"

.PHONY: clean
clean: ## Remove bin/ (the test binaries' cache outside the repo is kept).
	rm -rf $(BIN)

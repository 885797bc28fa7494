# clusterip-policy: build, test and run a local cluster.
# `make help` lists the targets.

SHELL := /usr/bin/env bash
GO ?= go
BIN_DIR ?= bin
# The version scheme (docs/release.md): the VERSION file names the release
# being prepared (semver; v0.x while the API is v1alpha1). A build of the
# commit tagged with it is that version; any other commit is VERSION-dev.
# COMMIT is the short hash, with -dirty when tracked files have changes.
RELEASE_VERSION := $(shell cat VERSION)
VERSION ?= $(shell if [ "$$(git describe --exact-match --tags 2>/dev/null)" = "$(RELEASE_VERSION)" ]; then echo $(RELEASE_VERSION); else echo $(RELEASE_VERSION)-dev; fi)
COMMIT ?= $(shell c=$$(git rev-parse --short HEAD 2>/dev/null || echo unknown); git diff --quiet HEAD 2>/dev/null || c=$$c-dirty; echo $$c)
LDFLAGS := -s -w -X clusterip-policy/internal/version.version=$(VERSION) -X clusterip-policy/internal/version.commit=$(COMMIT)
# Every go command make runs (vet, the tests, the binary, the image's
# linux/amd64 build) compiles with the same flags as the shipped binary, so
# Go's build cache compiles each package once: with the tests on cgo and
# full paths, a cold `make build` after them recompiled everything (3 min on
# 2 cores). Tests find their files from the working directory, never from
# their source path, which -trimpath cuts.
export CGO_ENABLED := 0
export GOFLAGS := $(strip $(GOFLAGS) -trimpath)

.PHONY: release-tools release-check-tools generate help build test unit e2e chaos tools vet fmt-check lint up down demo image certs bench review bench-e2e bench-cli bench-smoke release release-check version vulncheck e2e-versions node-tools node-up node-down node-e2e

help: ## list the targets
	@grep -hE '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

build: ## build bin/clusterip-policy (from cmd/webhook) with version information
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN_DIR)/clusterip-policy ./cmd/webhook

review: build ## review the shipped example Services against the example policy, offline
	@# exit 1 means "some Service is denied", which the examples show on purpose
	$(BIN_DIR)/clusterip-policy review --policy examples/clusterippolicy.yaml -o text examples/services/; test $$? -le 1

test: vet fmt-check lint unit e2e chaos bench-smoke ## what a change must pass (CI runs it, then release-check, e2e-versions, node-e2e, vulncheck): vet, gofmt, lint (package import rules), unit tests, end-to-end tests, fault scenarios, benchmark smoke

# tools/imagebuild is a module of its own (go test ./... does not reach it);
# its tests pin the image's reproducibility and the index skopeo copies as is.
unit: ## unit and handler tests (fast, no cluster), and the image builder's
	$(GO) test -count=1 ./...
	cd tools/imagebuild && $(GO) test -count=1 ./...

vet:
	$(GO) vet ./...
	$(GO) vet -tags e2e ./test/e2e/... ./test/bench/...

# golangci-lint v2, built from the module tools/golangci-lint pins
# (hack/lint.sh); .golangci.yml holds its linters and the package import
# rules of docs/architecture.md (depguard), so a broken rule fails CI.
lint: ## golangci-lint with the package import rules (depguard; docs/architecture.md)
	hack/lint.sh

fmt-check:
	@out=$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go')); \
	if [ -n "$$out" ]; then echo "not gofmt-clean:"; echo "$$out"; exit 1; fi

# The ClusterIPPolicy CRD is generated from pkg/apis/clusterippolicy/v1alpha1,
# the chart's README.md from its values.yaml; manifests/crd_generated_test.go
# and manifests/chart_readme_test.go fail when the committed files differ;
# docs/cli.md comes from the commands' --help (docs/docs_test.go holds it).
generate: tools build ## regenerate the ClusterIPPolicy CRD (base and chart), the chart's README.md, docs/cli.md and docs/api.md
	hack/generate-crd.sh
	hack/generate-chart-readme.sh
	hack/generate-cli-doc.sh
	hack/generate-api-doc.sh

tools: ## build etcd, kube-apiserver, kubectl and helm into .local/bin (cached)
	hack/build-tools.sh

# The console shows each test and its e2e: figures; the whole verbose log is in
# .local/e2e.log, and is printed in full when a test fails (it holds the
# process logs the harness dumps for a failing test).
e2e: tools build image ## end-to-end tests against a real etcd + kube-apiserver
	@mkdir -p .local
	$(GO) test -tags e2e -count=1 -timeout 40m -v -skip '^TestChaos' ./test/e2e/... > .local/e2e.log 2>&1; rc=$$?; \
	grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)|e2e:' .local/e2e.log; \
	if [ $$rc -ne 0 ]; then echo "=== e2e failed (exit $$rc); full log follows (.local/e2e.log)"; cat .local/e2e.log; fi; \
	exit $$rc

# The e2e smoke subset (hack/e2e-versions.sh names the tests) against the
# oldest Kubernetes release we claim (tools/kube-oldest, built into
# .local/k8s-<version>/bin by hack/build-kube-oldest.sh, cached after) and the newest (.local/bin). Prints a table of test x version; the logs are in
# .local/e2e-versions/. RELIABILITY.md "Kubernetes versions" has the figures.
e2e-versions: tools build ## the e2e smoke subset against the oldest and the newest kube-apiserver we claim
	hack/build-kube-oldest.sh
	hack/e2e-versions.sh

# The fault scenarios: three apiservers behind haproxy, two webhook replicas,
# 8 clients, one fault each (RELIABILITY.md). Needs haproxy on the machine.
chaos: tools build ## fault scenarios under load behind haproxy; prints the figures
	@mkdir -p .local
	$(GO) test -tags e2e -count=1 -timeout 30m -v -run '^TestChaos' ./test/e2e/... > .local/chaos.log 2>&1; rc=$$?; \
	grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)|e2e:' .local/chaos.log; \
	if [ $$rc -ne 0 ]; then echo "=== chaos failed (exit $$rc); full log follows (.local/chaos.log)"; cat .local/chaos.log; fi; \
	exit $$rc

bench: ## benchmarks of the decision functions and the view
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/...

# The side-by-side end-to-end benchmark (test/bench, docs/development.md "Benchmarks"):
# Service creates on one etcd + kube-apiserver with no admission, the
# do-nothing webhook, ours and a ValidatingAdmissionPolicy, alternated in
# each round. Knobs (make variables or environment): BENCH_ROUNDS (3),
# BENCH_CREATES (300 per run), BENCH_EXISTING (0,5000), BENCH_CONFIGS
# (none,nop,ours,vap), BENCH_WORKLOADS (dynamic:1,dynamic:8,mixed:8),
# BENCH_ARGS (extra `clusterip-policy serve` flags of ours; default --manage-match-conditions,
# as manifests/base runs it). About 11 minutes on
# 2 busy cores; the summary goes to .local/bench/summary.{md,json}, the whole
# output to .local/bench/bench.log.
bench-e2e: tools build ## side-by-side end-to-end create benchmark (knobs BENCH_*; summary in .local/bench/)
	@mkdir -p .local/bench
	BENCH_E2E=1 $(GO) test -tags e2e -count=1 -timeout 90m -v -run '^TestBenchE2E$$' ./test/bench/ 2>&1 | tee .local/bench/bench.log; exit $${PIPESTATUS[0]}

bench-cli: tools build ## bands --usage and suggest against a real apiserver with 20,000 Services (BENCH_CLI_SERVICES; table in .local/bench/cli.md)
	@mkdir -p .local/bench
	BENCH_CLI=1 $(GO) test -tags e2e -count=1 -timeout 60m -v -run '^TestBenchCLI$$' ./test/bench/ 2>&1 | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)|bench:|cli_test'; rc=$${PIPESTATUS[0]}; cat .local/bench/cli.md; exit $$rc

# The harness once with tiny numbers, every configuration once: fails when
# a configuration is not in force during its run or a webhook is not called
# where it must be.
bench-smoke: tools build ## the end-to-end benchmark harness once with tiny numbers (CI)
	@mkdir -p .local
	$(GO) test -tags e2e -count=1 -timeout 10m -v -run '^(TestBenchSmoke|TestBenchCLISmoke)$$' ./test/bench/ > .local/bench-smoke.log 2>&1; rc=$$?; \
	grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)|bench:|PROBLEM' .local/bench-smoke.log; \
	if [ $$rc -ne 0 ]; then echo "=== bench smoke failed (exit $$rc); full log follows (.local/bench-smoke.log)"; cat .local/bench-smoke.log; fi; \
	exit $$rc

up: tools build ## start etcd, kube-apiserver and the webhook in the background (.local/)
	hack/local-up.sh

down: ## stop what `make up` started
	hack/local-down.sh

demo: up ## start the local cluster and apply the example Services with kubectl
	hack/demo.sh

certs: ## create a CA and serving certificate for the self-signed overlay (rotate: make certs CERTS_ARGS=--reuse-ca)
	$(GO) run ./certs/cmd/gencerts $(CERTS_ARGS)

version: ## print the version make release writes: the VERSION file's, with -dev off its tag (docs/release.md)
	@echo $(VERSION)

# No Docker engine needed: tools/imagebuild (go-containerregistry) writes an
# OCI layout; two builds of one clean commit give one digest.
image: ## build the linux/amd64+arm64 image, the pause image and the SBOM into _output/image/
	VERSION=$(VERSION) COMMIT=$(COMMIT) hack/image.sh

# IMAGE_REPO is where the image will be pushed; the packaged chart's values
# and install.yaml name it with the tag and the digest (docs/release.md).
IMAGE_REPO ?= clusterip-policy
# RELEASE_URL is where the release's files will be downloadable: the krew
# manifest's archive URIs (docs/release.md).
RELEASE_URL ?= https://downloads.example.com/clusterip-policy/$(VERSION)
# The release needs helm (hack/release.sh packages the chart with it) and
# kubectl (it renders install.yaml with kubectl kustomize), not etcd or
# kube-apiserver.
release-tools:
	hack/build-tools.sh release

release: image release-tools ## image, chart, CLI binaries and plugin archives, krew manifest, install.yaml, SBOM and SHA256SUMS into _output/release/
	VERSION=$(VERSION) COMMIT=$(COMMIT) IMAGE_REPO=$(IMAGE_REPO) RELEASE_URL=$(RELEASE_URL) hack/release.sh
# What the release check runs beyond make release: cosign (signs and
# verifies, docs/release.md "Signing") and krew (installs the plugin from
# the krew manifest), plus etcd and kube-apiserver for the apply of
# install.yaml. Cached like every tool; CI builds them beside make test.
release-check-tools: tools
	hack/build-tools.sh release-check
# make release, then a test of what it wrote (test/e2e/release_test.go):
# sha256sum -c SHA256SUMS, the CLI's version and commit, the chart's
# version/appVersion and image digest, a second image build's digest,
# docs/release.md's skopeo copy into Debian's docker-registry on loopback,
# pulled back by digest, the image and chart signed and the SBOM attested
# with a throwaway cosign key and verified with docs/release.md's commands
# (and refused once tampered with), the plugin installed with krew from
# the krew manifest, its completion run by kubectl, and install.yaml
# applied to a real kube-apiserver. CI (.ci/run) runs it.
release-check: release release-check-tools ## make release, then check it: checksums, CLI version, chart digest, reproducibility, signatures, krew, install.yaml
	RELEASE_DIR=_output/release $(GO) test -tags e2e -count=1 -timeout 15m -v -run '^TestReleaseArtefacts$$' ./test/e2e/

vulncheck: ## known-vulnerability scan (govulncheck, database built from the golang.org/x/vulndb module)
	hack/vulncheck.sh

# A real node (docs/node.md): containerd + runc + the CNI bridge from Debian,
# kubelet, kube-scheduler and kube-controller-manager built from the
# k8s.io/kubernetes module, the images from `make image` served by a registry
# on 127.0.0.1. Needs root. State, kubeconfig and logs in .local/node.
node-tools: tools ## build the node's kubelet, kube-scheduler and kube-controller-manager into .local/bin (cached)
	hack/build-tools.sh node

node-up: node-tools build image ## start a real node and its control plane in the background (root; .local/node)
	hack/node-up.sh

node-down: ## stop the node, remove its bridge; fails if the host's network state is not as before node-up
	hack/node-down.sh

# node-up, the node scenarios (test/e2e/node_test.go, NODE_ENV), node-down;
# fails when a scenario fails or the host is not left as it was found.
node-e2e: node-tools build image ## the chart from the loopback registry on a real node: enforcement, rolling update, uninstall
	hack/node-e2e.sh

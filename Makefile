# clusterip-policy: build, test and run a local cluster.
# `make help` lists the targets.

SHELL := /usr/bin/env bash
GO ?= go
BIN_DIR ?= bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)

.PHONY: help build test unit e2e chaos tools vet fmt-check up down demo image certs bench review

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

build: ## build bin/webhook with version information
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN_DIR)/webhook ./cmd/webhook

review: build ## review the shipped example Services against the example policy, offline
	@# exit 1 means "some Service is denied", which the examples show on purpose
	$(BIN_DIR)/webhook review --policy examples/clusteripolicy.yaml -o text examples/services/; test $$? -le 1

test: vet fmt-check unit e2e chaos ## everything CI runs: vet, gofmt, unit tests, end-to-end tests, fault scenarios

unit: ## unit and handler tests (fast, no cluster)
	$(GO) test -count=1 ./...

vet:
	$(GO) vet ./...
	$(GO) vet -tags e2e ./test/e2e/...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go')); \
	if [ -n "$$out" ]; then echo "not gofmt-clean:"; echo "$$out"; exit 1; fi

tools: ## build etcd, kube-apiserver, kubectl and helm into .local/bin (cached)
	hack/build-tools.sh

# The console shows each test and its e2e: figures; the whole verbose log is in
# .local/e2e.log, and is printed in full when a test fails (it holds the
# process logs the harness dumps for a failing test).
e2e: tools build ## end-to-end tests against a real etcd + kube-apiserver
	@mkdir -p .local
	$(GO) test -tags e2e -count=1 -timeout 40m -v -skip '^TestChaos' ./test/e2e/... > .local/e2e.log 2>&1; rc=$$?; \
	grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)|e2e:' .local/e2e.log; \
	if [ $$rc -ne 0 ]; then echo "=== e2e failed (exit $$rc); full log follows (.local/e2e.log)"; cat .local/e2e.log; fi; \
	exit $$rc

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

up: tools build ## start etcd, kube-apiserver and the webhook in the background (.local/)
	hack/local-up.sh

down: ## stop what `make up` started
	hack/local-down.sh

demo: up ## start the local cluster and apply the example Services with kubectl
	hack/demo.sh

certs: ## create a CA and serving certificate for the self-signed overlay (rotate: make certs CERTS_ARGS=--reuse-ca)
	$(GO) run ./certs/cmd/gencerts $(CERTS_ARGS)

image: ## build the container image (needs a Docker engine)
	docker build --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) -t clusterip-policy:$(VERSION) .

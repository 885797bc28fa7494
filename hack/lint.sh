#!/usr/bin/env bash
# make lint: golangci-lint v2 with the rules of .golangci.yml (the package
# import rules of docs/architecture.md among them), built from the
# github.com/golangci/golangci-lint/v2 module that tools/golangci-lint/go.mod
# pins, so it needs only the Go module proxy. The binary is kept in
# _output/tools and in the tools cache outside the clone (hack/tools-cache.sh),
# and rebuilt when the pin changes (about 3 minutes cold on 2 cores). LINT_ARGS adds flags (e.g. "--fix").
# --build-tags e2e: the end-to-end suites and the benchmark harness
# (test/e2e, test/bench) build only under //go:build e2e, so a run without the
# tag skips them, their findings and their imports. No file is built only
# without the tag, so this one run also covers every untagged file.
# --allow-serial-runners: another clone linting on the same machine (the
# lock is per user) makes this run wait for it instead of failing at once.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
tools=_output/tools
mkdir -p "$tools"

# shellcheck source=hack/tools-cache.sh
source "$root/hack/tools-cache.sh"
pin=$(cd tools/golangci-lint && go list -m -f '{{.Path}}@{{.Version}}' github.com/golangci/golangci-lint/v2)
stamp=$tools/.golangci-lint.version
if [[ ! -x $tools/golangci-lint || "$(cat "$stamp" 2>/dev/null)" != "$pin" ]]; then
	if from_cache golangci-lint "${pin##*@}" "$tools/golangci-lint"; then
		echo "lint: golangci-lint $pin copied from $cache"
	else
		echo "lint: building golangci-lint ($pin)"
		(cd tools/golangci-lint && CGO_ENABLED=0 go build -trimpath -o "$root/$tools/golangci-lint" github.com/golangci/golangci-lint/v2/cmd/golangci-lint)
		to_cache golangci-lint "${pin##*@}" "$tools/golangci-lint"
	fi
	echo "$pin" >"$stamp"
fi
# shellcheck disable=SC2086 # LINT_ARGS is a list of flags
"$tools/golangci-lint" run --allow-serial-runners --build-tags e2e ${LINT_ARGS:-} ./...
# tools/imagebuild (the release's image builder) is a module of its own,
# which ./... does not reach; the same rules hold there.
# shellcheck disable=SC2086
(cd tools/imagebuild && "$root/$tools/golangci-lint" run --allow-serial-runners ${LINT_ARGS:-} ./...)

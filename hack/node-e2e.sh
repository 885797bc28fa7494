#!/usr/bin/env bash
# `make node-e2e`: brings a real node up (hack/node-up.sh), runs the node
# scenarios against it (test/e2e/node_test.go, which reads .local/node/env),
# and brings it down (hack/node-down.sh), which fails if the host's network
# state is not what it was before. The console shows each test and its e2e:
# figures; the whole log is .local/node-e2e.log, printed when a test fails.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
start=$SECONDS
hack/node-down.sh >/dev/null 2>&1 || true # a node left by an interrupted run
if ! hack/node-up.sh; then
	exit 1
fi
up=$((SECONDS - start))
NODE_ENV=$root/.local/node/env go test -tags e2e -count=1 -timeout 45m -v -run '^TestNode' ./test/e2e/ >.local/node-e2e.log 2>&1
rc=$?
grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)|e2e:' .local/node-e2e.log
if ((rc != 0)); then
	echo "=== node e2e failed (exit $rc); full log follows (.local/node-e2e.log)"
	cat .local/node-e2e.log
fi
hack/node-down.sh
down=$?
echo "node-e2e: node-up ${up}s, whole run $((SECONDS - start))s; tests exit $rc, node-down exit $down"
((rc == 0 && down == 0))

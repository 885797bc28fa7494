#!/usr/bin/env bash
# Writes charts/clusterip-policy/README.md from the "# --" comments in its
# values.yaml and README.md.gotmpl with helm-docs (built by
# hack/build-tools.sh from tools/helm-docs). manifests/chart_readme_test.go
# fails when the committed README.md differs.
#
# Usage: hack/generate-chart-readme.sh [--dry-run]  (--dry-run prints it)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
gen=${HELM_DOCS:-$root/.local/bin/helm-docs}
if [[ ! -x "$gen" ]]; then
	echo "no helm-docs at $gen: run make tools (hack/build-tools.sh)" >&2
	exit 1
fi
cd "$root/charts/clusterip-policy"
exec "$gen" --chart-search-root=. --template-files=README.md.gotmpl --output-file=README.md --log-level=warning "$@"

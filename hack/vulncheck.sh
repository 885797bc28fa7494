#!/usr/bin/env bash
# Known-vulnerability scan of the webhook's module graph (make vulncheck).
# The database is built here from the golang.org/x/vulndb module that
# tools/vulncheck/go.mod pins (its data/osv/*.json, indexed by vulndb's own
# cmd/indexdb into the layout govulncheck reads with -db file:///DIR), so the
# scan needs only the Go module proxy, and its result changes only when that
# pin is bumped (`cd tools/vulncheck && go get golang.org/x/vulndb@latest`).
# govulncheck runs in source mode: it reports a vulnerability only when our
# code can reach the vulnerable symbol, and exits 3 when it does.
# VULNCHECK_ARGS adds flags (e.g. "-show verbose", "-scan module").
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
tools=_output/tools
mkdir -p "$tools"

# shellcheck source=hack/tools-cache.sh
source "$root/hack/tools-cache.sh"
pins=$(cd tools/vulncheck && go list -m -f '{{.Path}}@{{.Version}}' golang.org/x/vuln golang.org/x/vulndb | tr '\n' ' ')
stamp=$tools/.vulncheck.version
if [[ ! -x $tools/govulncheck || ! -x $tools/indexdb || "$(cat "$stamp" 2>/dev/null)" != "$pins" ]]; then
	vuln=$(cd tools/vulncheck && go list -m -f '{{.Version}}' golang.org/x/vuln)
	vulndb=$(cd tools/vulncheck && go list -m -f '{{.Version}}' golang.org/x/vulndb)
	if from_cache govulncheck "$vuln" "$tools/govulncheck" && from_cache indexdb "$vulndb" "$tools/indexdb"; then
		echo "vulncheck: govulncheck and indexdb ($pins) copied from $cache"
	else
		echo "vulncheck: building govulncheck and indexdb ($pins)"
		(cd tools/vulncheck && CGO_ENABLED=0 go build -trimpath -o "$root/$tools/govulncheck" golang.org/x/vuln/cmd/govulncheck &&
			CGO_ENABLED=0 go build -trimpath -o "$root/$tools/indexdb" golang.org/x/vulndb/cmd/indexdb)
		to_cache govulncheck "$vuln" "$tools/govulncheck"
		to_cache indexdb "$vulndb" "$tools/indexdb"
	fi
	rm -rf "$tools/vulndb"
	echo "$pins" >"$stamp"
fi

db=$root/$tools/vulndb
if [[ ! -f $db/index/db.json ]]; then
	src=$(cd tools/vulncheck && go mod download -json golang.org/x/vulndb | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
	if [[ ! -d $src/data/osv ]]; then
		echo "vulncheck: $src/data/osv is missing: the vulndb module no longer ships the OSV files this script indexes" >&2
		exit 2
	fi
	rm -rf "$db.tmp"
	"$tools/indexdb" -vulns "$src/data/osv" -out "$db.tmp"
	mv "$db.tmp" "$db"
	echo "vulncheck: database of $(ls "$db/ID" | grep -c "\.json$") entries from $src"
fi

# A finding in the Go standard library is fixed by building with a newer Go,
# not by a change here. VULNCHECK_STDLIB=warn (CI: this machine's Go is what
# it is) reports such findings and the Go that fixes them but exits 0 when
# they are the only ones; a finding in a module we require always fails.
# Unset (a release build), every finding fails.
out=$(mktemp)
trap 'rm -f "$out"' EXIT
rc=0
# shellcheck disable=SC2086 # VULNCHECK_ARGS is a list of flags
"$tools/govulncheck" -db "file://$db" ${VULNCHECK_ARGS:-} ./... >"$out" 2>&1 || rc=$?
cat "$out"
if [[ $rc -eq 3 && ${VULNCHECK_STDLIB:-} == warn ]]; then
	found=$(sed -n 's/^ *Found in: //p' "$out" | sort -u)
	if [[ -n $found ]] && ! grep -qv '@go1\.' <<<"$found"; then
		fixed=$(sed -n 's/^ *Fixed in: .*@\(go1\.[0-9.]*\)$/\1/p' "$out" | sort -uV | tail -1)
		echo "vulncheck: WARNING: every finding above is in the Go standard library of $(go env GOVERSION); build releases with ${fixed:-a newer Go} or later (docs/release.md). No module we require is affected."
		exit 0
	fi
fi
exit "$rc"

# Sourced by hack/build-tools.sh, hack/build-kube-oldest.sh, hack/lint.sh and
# hack/vulncheck.sh.
# Built tools are also kept outside the clone, by name, pinned version and
# Go version, so a fresh clone on a machine that built them once (CI runs
# on a fresh clone) copies them instead of building them again: a cold
# kube-apiserver is about 11 minutes on 2 cores. TOOLS_CACHE= (empty) turns
# the cache off.
cache=${TOOLS_CACHE-${XDG_CACHE_HOME:-$HOME/.cache}/clusterip-policy/tools}
goversion=$(go env GOVERSION)

# from_cache NAME VERSION DEST: copies a cached build to DEST; false if none.
from_cache() {
	local entry="$cache/$1-$2-$goversion"
	[[ -n $cache && -x $entry ]] || return 1
	cp "$entry" "$3.tmp" && mv "$3.tmp" "$3"
}

# to_cache NAME VERSION SRC: keeps a copy of a fresh build.
to_cache() {
	[[ -n $cache ]] || return 0
	mkdir -p "$cache"
	local entry="$cache/$1-$2-$goversion"
	[[ -x $entry ]] && return 0
	cp "$3" "$entry.tmp.$$" && mv "$entry.tmp.$$" "$entry"
}


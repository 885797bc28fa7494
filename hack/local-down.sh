#!/usr/bin/env bash
# `make down`: stops what `make up` started, recorded as "name pid binary"
# in LOCAL_DIR/pids (default .local/cluster), with hack/stop-pids.sh. The
# logs stay in LOCAL_DIR/logs until the next `make up`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${LOCAL_DIR:-.local/cluster}
[[ $dir == /* ]] || dir=$root/$dir
pids=$dir/pids

if [[ ! -f $pids ]]; then
	echo "nothing to stop (no $pids)"
	exit 0
fi

# shellcheck source=hack/stop-pids.sh
. "$root/hack/stop-pids.sh"
stop_pids "$pids"
echo "stopped; logs kept in ${dir#$root/}/logs"

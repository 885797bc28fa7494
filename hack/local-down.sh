#!/usr/bin/env bash
# `make down`: stops what `make up` started. Each process runs in a process
# group of its own, recorded as "name pid binary" in LOCAL_DIR/pids (default .local/cluster); the
# group gets SIGTERM, then SIGKILL after 10 seconds. A pid that now belongs to
# another program is left alone. The logs stay in LOCAL_DIR/logs until the
# next `make up`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${LOCAL_DIR:-.local/cluster}
[[ $dir == /* ]] || dir=$root/$dir
pids=$dir/pids

if [[ ! -f $pids ]]; then
	echo "nothing to stop (no $pids)"
	exit 0
fi

# Stop in reverse start order, one after the other: the webhook, then the
# apiserver (which shuts down cleanly only while etcd still answers), then etcd.
mapfile -t lines < <(tac "$pids")
for line in "${lines[@]}"; do
	read -r name pid binary <<<"$line"
	if ! kill -0 "$pid" 2>/dev/null; then
		echo "$name (pid $pid) is not running"
		continue
	fi
	# A reused pid would run something else: /proc/PID/cmdline names the binary.
	if ! tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "$binary"; then
		echo "pid $pid no longer runs $name ($binary); leaving it alone"
		continue
	fi
	echo "stopping $name (pid $pid)"
	kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq 100); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		echo "$name (pid $pid) ignored SIGTERM for 10s: killing it"
		kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
	fi
done
rm -f "$pids"
echo "stopped; logs kept in ${dir#$root/}/logs"

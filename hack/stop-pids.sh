# Sourced by hack/local-down.sh and hack/node-down.sh: stop_pids FILE stops
# the processes FILE records, one "name pid binary" line each, in reverse
# start order (the webhook before the apiserver, the apiserver before etcd,
# which it needs to shut down cleanly), one after the other. Each process
# runs in a process group of its own: the group gets SIGTERM, then SIGKILL
# after 10 seconds. A pid that now belongs to another program is left alone.
# FILE is removed afterwards.
stop_pids() {
	local file=$1 line name pid binary
	local -a lines
	mapfile -t lines < <(tac "$file")
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
	rm -f "$file"
}

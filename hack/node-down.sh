#!/usr/bin/env bash
# `make node-down`: stops what `make node-up` started and puts the host back.
# In order: the workloads (so the kubelet tears their sandboxes down through
# CNI while it still runs), the processes in reverse start order
# (hack/stop-pids.sh, as hack/local-down.sh), the containerd shims of this node's socket, the
# pod network namespaces and links left behind, the bridge, the mounts under
# .local/node, the kubelet's cgroups, the kernel tunables the kubelet changed.
# Then it compares hack/node-state.sh with what node-up recorded and exits 1
# on any difference. The logs stay in .local/node/logs.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# .local may be a symlink; the kubelet and the mount table use the real path.
dir=$(realpath -m "$root/.local")/node
if [[ ! -f $dir/state-before.txt ]]; then
	echo "nothing to stop (no $dir/state-before.txt)"
	exit 0
fi
NODE_BRIDGE=${NODE_BRIDGE:-cipnode0}
sock=$dir/containerd/containerd.sock
# shellcheck disable=SC1091
[[ -f $dir/env ]] && . "$dir/env"

if [[ -f $dir/kubeconfig && -f $dir/pids ]] && .local/bin/kubectl --kubeconfig "$dir/kubeconfig" --request-timeout=5s get --raw /readyz >/dev/null 2>&1; then
	k=(.local/bin/kubectl --kubeconfig "$dir/kubeconfig" --request-timeout=20s)
	echo "deleting the workloads and their pods"
	"${k[@]}" delete validatingwebhookconfigurations,mutatingwebhookconfigurations --all --wait=false >/dev/null 2>&1
	"${k[@]}" delete deployments,replicasets,daemonsets,statefulsets,jobs --all -A --wait=false >/dev/null 2>&1
	"${k[@]}" delete pods --all -A --grace-period=1 --wait=false >/dev/null 2>&1
	for _ in $(seq 60); do
		[[ -z $("${k[@]}" get pods -A -o name 2>/dev/null) ]] && ! ctr -a "$sock" -n k8s.io tasks ls -q 2>/dev/null | grep -q . && break
		sleep 1
	done
fi

if [[ -f $dir/pids ]]; then
	# shellcheck source=hack/stop-pids.sh
	. "$root/hack/stop-pids.sh"
	stop_pids "$dir/pids"
fi

# Shims outlive containerd by design (pods survive its restart). Only the
# shims of this node's socket are ours: their command line names it.
for pid in $(pgrep -f -- "-address $sock" 2>/dev/null); do
	echo "killing the containerd shim $pid and its containers"
	pkill -KILL -P "$pid" 2>/dev/null
	kill -KILL "$pid" 2>/dev/null
done

# Pod network namespaces containerd made (cni-*) that were not there before.
before_ns=$(sed -n '/^## ip netns/,/^## /p' "$dir/state-before.txt")
for ns in $(ip netns list 2>/dev/null | awk '$1 ~ /^cni-/ {print $1}'); do
	if ! grep -q "^$ns\b" <<<"$before_ns"; then
		echo "removing network namespace $ns"
		ip netns delete "$ns" 2>/dev/null
	fi
done
if ip link show "$NODE_BRIDGE" >/dev/null 2>&1; then
	for l in $(ip -o link show master "$NODE_BRIDGE" 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
		ip link delete "$l" 2>/dev/null
	done
	echo "removing bridge $NODE_BRIDGE"
	ip link delete "$NODE_BRIDGE"
fi

# Secret and token volumes (tmpfs), containerd's sandbox mounts.
findmnt -rn -o TARGET | grep -F "$dir/" | sort -r | while read -r m; do
	umount -l "$m" 2>/dev/null
done

# The kubelet's cgroups (kubepods under each hierarchy), deepest first, when
# node-up found none.
# A cgroup goes only once its last process has exited: retry for 30 s,
# then name what is still in one.
if ! grep -q "^/sys/fs/cgroup/.*/kubepods" "$dir/state-before.txt"; then
	for _ in $(seq 60); do
		left=0
		for c in /sys/fs/cgroup/*/kubepods*; do
			[[ -d $c ]] || continue
			find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null
			[[ -d $c ]] && left=1
		done
		((left)) || break
		sleep 0.5
	done
	for c in /sys/fs/cgroup/*/kubepods; do
		[[ -d $c ]] && find "$c" -name cgroup.procs -exec sh -c 'p=$(cat "$1"); [ -n "$p" ] && echo "node-down: still in $1: $p"' _ {} \;
	done
fi

# Outside .local/node, containerd 1.6 keeps its shims' sockets in
# /run/containerd/s and libcni its cache in /var/lib/cni/results, whatever
# the configuration says; both are empty once the pods are gone. Remove
# them when node-up found none (hack/node-state.sh lists them).
# After a crash (the kubelet or containerd killed) they still hold this
# node's entries: libcni's are named after its network (cip-node), and the
# shim sockets are all this node's when node-up found no /run/containerd.
# (`ls -d` in node-state lists the directories, not what is in them.)
rm -f /var/lib/cni/results/cip-node-*
# containerd's pod loopback entries carry no node name: only when node-up
# found no /var/lib/cni are they all this node's.
grep -qx /var/lib/cni "$dir/state-before.txt" || rm -f /var/lib/cni/results/cni-loopback-*
grep -qx /run/containerd "$dir/state-before.txt" || rm -f /run/containerd/s/*
for d in /run/containerd/s /run/containerd /var/lib/cni/results /var/lib/cni; do
	grep -qx "$d" "$dir/state-before.txt" || rmdir "$d" 2>/dev/null
done

# The kernel tunables the kubelet sets (vm.overcommit_memory, kernel.panic,
# ...), back to what they were.
while read -r key _ value; do
	[[ $key == vm.* || $key == kernel.* ]] || continue
	[[ $(sysctl -n "$key") == "$value" ]] || sysctl -q -w "$key=$value"
done < <(sed -n '1,/^## /p' "$dir/state-before.txt" | grep ' = ')

if findmnt -rn -o TARGET | grep -qF "$dir/"; then
	echo "node-down: still mounted under $dir:" >&2
	findmnt -rn -o TARGET | grep -F "$dir/" >&2
	exit 1
fi
hack/node-state.sh >"$dir/state-after.txt"
if ! diff -u "$dir/state-before.txt" "$dir/state-after.txt"; then
	echo "node-down: the host's state differs from before node-up (diff above; $dir/state-{before,after}.txt)" >&2
	exit 1
fi
echo "stopped; the host's network state, tunables and cgroups are as before node-up (hack/node-state.sh); logs kept in $dir/logs"

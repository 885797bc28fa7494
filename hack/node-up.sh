#!/usr/bin/env bash
# `make node-up`: a real node on this machine (docs/node.md). containerd +
# runc + the CNI bridge plugin from Debian, and a kubelet, kube-scheduler and
# kube-controller-manager built from the k8s.io/kubernetes module
# (make node-tools), beside the harness's etcd and kube-apiserver. The images
# (ours and the pod sandbox) come from `make image` through a registry on
# 127.0.0.1: nothing is pulled from outside.
#
#   NODE_BRIDGE        bridge the pods attach to (default cipnode0)
#   NODE_POD_CIDR      pod addresses; the bridge gets the first (default 10.244.0.0/24)
#   NODE_SERVICE_CIDR  --service-cluster-ip-range (default 10.96.0.0/16)
#
# Needs root (a bridge, cgroups, mounts). Everything lives in .local/node
# (emptied on every start); .local/node/env names the kubeconfig, the
# registry and the image. `make node-down` stops it all, removes the bridge
# and what the pods left, and fails if the host's network state differs
# from what this script recorded first (hack/node-state.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# .local may be a symlink; the kubelet and the mount table use the real path.
dir=$(realpath -m "$root/.local")/node

if [[ $(id -u) != 0 ]]; then
	echo "node-up: needs root (it creates a bridge, cgroups and mounts); run it as root" >&2
	exit 2
fi
if [[ -f $dir/pids ]]; then
	echo "node-up: a node from an earlier node-up is recorded in $dir/pids: run \`make node-down\` first" >&2
	exit 2
fi
for b in containerd runc ip iptables-save; do
	command -v "$b" >/dev/null || { echo "node-up: $b is missing: apt-get install containerd runc containernetworking-plugins iproute2 iptables (.ci/run does)" >&2; exit 2; }
done
for f in .local/bin/kubelet .local/bin/kube-scheduler .local/bin/kube-controller-manager .local/bin/kube-apiserver _output/image/clusterip-policy/index.json _output/image/pause/index.json _output/tools/imagebuild; do
	[[ -e $f ]] || { echo "node-up: $f is missing: run \`make node-tools tools image\` (make node-up does)" >&2; exit 2; }
done

rm -rf "$dir"
mkdir -p "$dir"
hack/node-state.sh >"$dir/state-before.txt"
go build -o .local/bin/localcluster ./test/e2e/cmd/localcluster
if ! .local/bin/localcluster node-up --dir "$dir" --bridge "${NODE_BRIDGE:-cipnode0}" \
	--pod-cidr "${NODE_POD_CIDR:-10.244.0.0/24}" --service-cidr "${NODE_SERVICE_CIDR:-10.96.0.0/16}"; then
	echo "node-up failed; stopping what started (logs stay in $dir/logs)" >&2
	hack/node-down.sh || true
	exit 1
fi
# The kubelet sets vm.overcommit_memory, kernel.panic, kernel.panic_on_oops
# (and the keyring limits) once, at start, as every node does. This machine
# is not ours alone (panic_on_oops=1 would turn any kernel oops into a
# reboot): put them back now; the kubelet does not look again.
while read -r key _ value; do
	[[ $key == vm.* || $key == kernel.* ]] || continue
	[[ $(sysctl -n "$key") == "$value" ]] || { echo "node-up: restoring $key=$value (the kubelet set $(sysctl -n "$key"))"; sysctl -q -w "$key=$value"; }
done < <(sed -n '1,/^## /p' "$dir/state-before.txt" | grep ' = ')

#!/usr/bin/env bash
# Prints the host state a real node (hack/node-up.sh) may touch and must
# leave as it found it: forwarding and the kernel tunables the kubelet sets
# (it restores none of them itself), iptables and ip6tables, routes, links,
# network namespaces, the kubelet's top cgroups, and the directories
# containerd and libcni make outside the node's own. node-up saves this before
# it starts; node-down restores the tunables and compares (make node-e2e fails
# on any difference). Packet counters and iptables-save's dated comments are
# left out: they change with every packet and run.
set -uo pipefail
sysctl net.ipv4.ip_forward net.ipv6.conf.all.forwarding \
	vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops \
	kernel.keys.root_maxkeys kernel.keys.root_maxbytes
echo "## iptables-save"
iptables-save 2>&1 | grep -v '^#' | sed -E 's/\[[0-9]+:[0-9]+\]//'
echo "## ip6tables-save"
ip6tables-save 2>&1 | grep -v '^#' | sed -E 's/\[[0-9]+:[0-9]+\]//'
echo "## ip route"
ip route
ip -6 route
echo "## ip link"
ip -o link | sed -E 's/ +/ /g'
echo "## ip netns"
ip netns list
echo "## kubepods cgroups"
ls -d /sys/fs/cgroup/*/kubepods* 2>/dev/null
echo "## directories containerd and libcni make outside .local/node"
ls -d /run/containerd/s /run/containerd /var/lib/cni/results /var/lib/cni 2>/dev/null
exit 0

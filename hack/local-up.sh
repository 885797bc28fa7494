#!/usr/bin/env bash
# `make up`: starts etcd, one kube-apiserver and the webhook on 127.0.0.1 in the
# background, registers the webhook, and returns once the apiserver calls it.
#
#   SERVICE_CIDR  --service-cluster-ip-range of the apiserver (default 10.96.0.0/16)
#   POLICY        policy file the webhook reads, and re-reads when it changes
#                 (default examples/policy.yaml)
#   CLIENT_AUTH   non-empty: the apiserver presents a client certificate and the
#                 webhook requires it (--client-ca-file; files in
#                 .local/cluster/webhook-client-auth)
#
# Everything lives in .local/cluster (etcd data, certificates, logs; emptied on
# every start); the admin kubeconfig is copied to .local/kubeconfig. It uses
# the end-to-end tests' harness (test/e2e/framework), so `make up` runs exactly
# what `make e2e` tests. `make down` (hack/local-down.sh) stops it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
dir=.local/cluster
SERVICE_CIDR=${SERVICE_CIDR:-10.96.0.0/16}
POLICY=${POLICY:-examples/policy.yaml}

if [[ -f $dir/pids ]]; then
	alive=0 total=0
	while read -r name pid _; do
		total=$((total + 1))
		if kill -0 "$pid" 2>/dev/null; then alive=$((alive + 1)); fi
	done <"$dir/pids"
	if ((alive == total)); then
		echo "already running (pids in $dir/pids); KUBECONFIG=.local/kubeconfig. Restart with: make down up"
		exit 0
	fi
	echo "$alive of $total processes of the last 'make up' still run: stopping them first"
	hack/local-down.sh
fi

# Build what is missing (make up does this through its prerequisites already).
if [[ ! -x .local/bin/kube-apiserver || ! -x .local/bin/etcd || ! -x .local/bin/kubectl ]]; then
	hack/build-tools.sh
fi
if [[ ! -x bin/clusterip-policy ]]; then
	make build
fi
go build -o .local/bin/localcluster ./test/e2e/cmd/localcluster

exec .local/bin/localcluster up --dir "$dir" --kubeconfig .local/kubeconfig \
	--service-cidr "$SERVICE_CIDR" --policy "$POLICY" ${CLIENT_AUTH:+--client-auth}

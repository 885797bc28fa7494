#!/usr/bin/env bash
# `make up`: starts etcd, one kube-apiserver and the webhook on 127.0.0.1 in the
# background, registers the webhook, and returns once the apiserver calls it.
#
#   SERVICE_CIDR  --service-cluster-ip-range of the apiserver (default 10.96.0.0/16)
#   POLICY        the ClusterIPPolicy object manifest applied before the webhook
#                 starts (default examples/clusterippolicy.yaml); after an edit,
#                 kubectl apply -f it again
#   LOCAL_DIR     where everything lives (default .local/cluster)
#   LOCAL_KUBECONFIG  where the admin kubeconfig is copied (default .local/kubeconfig)
#   CLIENT_AUTH   non-empty: the apiserver presents a client certificate and the
#                 webhook requires it (--client-ca-file; files in
#                 .local/cluster/webhook-client-auth)
#
# The webhook runs as manifests/base deploys it: policy object, reservation
# holds, managed matchConditions, periodic audit. Everything lives in
# LOCAL_DIR (etcd data, certificates, logs; emptied on every start). It uses
# the end-to-end tests' harness (test/e2e/framework), so `make up` runs exactly
# what `make e2e` tests. `make down` (hack/local-down.sh) stops it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
dir=${LOCAL_DIR:-.local/cluster}
kubeconfig=${LOCAL_KUBECONFIG:-.local/kubeconfig}
SERVICE_CIDR=${SERVICE_CIDR:-10.96.0.0/16}
POLICY=${POLICY:-examples/clusterippolicy.yaml}

if [[ -f $dir/pids ]]; then
	alive=0 total=0
	while read -r name pid _; do
		total=$((total + 1))
		if kill -0 "$pid" 2>/dev/null; then alive=$((alive + 1)); fi
	done <"$dir/pids"
	if ((alive == total)); then
		echo "already running (pids in $dir/pids); KUBECONFIG=$kubeconfig. Restart with: make down up"
		exit 0
	fi
	echo "$alive of $total processes of the last 'make up' still run: stopping them first"
	LOCAL_DIR=$dir hack/local-down.sh
fi

# Build what is missing (make up does this through its prerequisites already).
if [[ ! -x .local/bin/kube-apiserver || ! -x .local/bin/etcd || ! -x .local/bin/kubectl ]]; then
	hack/build-tools.sh
fi
if [[ ! -x bin/clusterip-policy ]]; then
	make build
fi
go build -o .local/bin/localcluster ./test/e2e/cmd/localcluster

exec .local/bin/localcluster up --dir "$dir" --kubeconfig "$kubeconfig" \
	--service-cidr "$SERVICE_CIDR" --policy "$POLICY" ${CLIENT_AUTH:+--client-auth}

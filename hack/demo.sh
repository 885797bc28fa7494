#!/usr/bin/env bash
# `make demo` (after `make up`): shows the webhook as manifests/base deploys
# it, through the local kube-apiserver and kubectl: the policy object and its
# status, the hold on the reserved address, the managed matchCondition, then
# the example Services applied (allowed, patched, denied) and the webhook's
# decisions. Repeatable: it removes what an earlier run created.
#
#   LOCAL_DIR, LOCAL_KUBECONFIG  as for hack/local-up.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
dir=${LOCAL_DIR:-.local/cluster}
export KUBECONFIG=${LOCAL_KUBECONFIG:-$root/.local/kubeconfig}
kubectl() { "$root/.local/bin/kubectl" "$@"; }
log=$dir/logs/webhook.log
if [[ ! -f $dir/pids || ! -f $log ]]; then
	echo "no local cluster in $dir: run make up (or make demo) first" >&2
	exit 1
fi
kubectl delete --ignore-not-found -f examples/services/ >/dev/null
from=$(stat -c %s "$log")
bold=$'\e[1m' red=$'\e[31m' green=$'\e[32m' yellow=$'\e[33m' off=$'\e[0m'
[[ -t 1 ]] || bold='' red='' green='' yellow='' off=''

echo "${bold}0. The policy$off: the ClusterIPPolicy object default, applied from examples/clusterippolicy.yaml"
kubectl get clusterippolicy default -o jsonpath='{.spec}' | sed 's/^/  spec: /'
echo
kubectl get clusterippolicy default | sed 's/^/  /'
echo

echo "${bold}1. The reserved address is held$off before its Service exists (an IPAddress object, so the allocator never hands it out)"
kubectl get ipaddresses -l ipaddress.kubernetes.io/managed-by=clusterip-policy.io \
	-o custom-columns='ADDRESS:.metadata.name,HELD FOR:.spec.parentRef.namespace,NAME:.spec.parentRef.name' | sed 's/^/  /'
echo

echo "${bold}2. The managed matchCondition$off: the apiserver calls the webhook only for creates the policy can act on"
for kind in mutatingwebhookconfiguration validatingwebhookconfiguration; do
	echo "  $kind clusterip-policy: $(kubectl get "$kind" clusterip-policy -o jsonpath='{.webhooks[0].matchConditions[*].name}')"
done
echo

echo "${bold}3. kube-dns without a clusterIP, as a server-side dry run$off"
echo "  \$ kubectl create --dry-run=server -f examples/services/01-kube-dns.yaml (clusterIP line removed)"
ip=$(sed '/^  clusterIP:/d' examples/services/01-kube-dns.yaml |
	kubectl create --dry-run=server -o jsonpath='{.spec.clusterIP}' -f -)
echo "  ${yellow}patched$off: the webhook assigns the reserved $ip; nothing is allocated by a dry run"
echo

echo "${bold}4. The example Services$off (examples/services/)"
for f in examples/services/*.yaml; do
	# The file's leading comment says what it shows.
	what=$(awk '/^#/{sub(/^# */,""); printf "%s ", $0; next} {exit}' "$f")
	echo "  ${bold}\$ kubectl apply -f $f$off"
	echo "    $what"
	if out=$(kubectl apply -f "$f" 2>&1); then
		echo "    ${green}allowed$off: $out"
	elif [[ $out == *"admission webhook"*"denied the request: "* ]]; then
		webhook=${out#*admission webhook \"}
		webhook=${webhook%%\"*}
		echo "    ${red}denied$off by $webhook: ${out#*denied the request: }"
	else
		echo "    ${red}failed$off: $out"
	fi
done
echo

echo "${bold}5. The Services and their ClusterIPs$off"
kubectl get services -A -o custom-columns='NAMESPACE:.metadata.namespace,NAME:.metadata.name,TYPE:.spec.type,CLUSTER-IP:.spec.clusterIP' | sed 's/^/  /'
echo

echo "${bold}6. The webhook's decisions during this demo$off (one line per stage and request; a create"
echo "   that names no address and owns no reservation never reaches the webhook)"
.local/bin/localcluster audit --log "$log" --from "$from" | sed 's/^/  /'
echo
cat <<EOT
${bold}Decision log$off: $log (JSON, one line per decision: grep '"admission decision"' $log | jq .)
Metrics:   $(awk '/--metrics-bind-address=/{sub(/.*--metrics-bind-address=/,""); sub(/ .*/,""); print "http://" $0 "/metrics"; exit}' "$log")
Try your own: export KUBECONFIG=$KUBECONFIG PATH=\$PWD/.local/bin:\$PATH
              kubectl create service clusterip web --tcp=80 --clusterip=10.96.0.30
Change the policy: edit examples/clusterippolicy.yaml, then kubectl apply -f examples/clusterippolicy.yaml
Stop: make down
EOT

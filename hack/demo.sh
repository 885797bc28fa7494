#!/usr/bin/env bash
# `make demo` (after `make up`): applies the example Services with kubectl
# through the local kube-apiserver and shows what the webhook allowed, patched
# and denied, and where its audit log is.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export KUBECONFIG=$root/.local/kubeconfig
kubectl() { "$root/.local/bin/kubectl" "$@"; }
log=.local/cluster/logs/webhook.log
if [[ ! -f .local/cluster/pids || ! -f $log ]]; then
	echo "no local cluster: run make up (or make demo) first" >&2
	exit 1
fi
# Repeatable: remove what an earlier run created.
kubectl delete --ignore-not-found -f examples/services/ >/dev/null
from=$(stat -c %s "$log")
bold=$'\e[1m' red=$'\e[31m' green=$'\e[32m' yellow=$'\e[33m' off=$'\e[0m'
[[ -t 1 ]] || bold='' red='' green='' yellow='' off=''

echo "${bold}Policy$off ($(awk '/--policy=/{sub(/.*--policy=/,""); sub(/ .*/,""); print; exit}' "$log")):"
grep -vE '^\s*(#|$)' examples/policy.yaml | sed 's/^/  /'
echo

echo "${bold}1. kube-dns without a clusterIP, as a server-side dry run$off"
echo "  \$ kubectl create --dry-run=server -f examples/services/01-kube-dns.yaml (clusterIP line removed)"
ip=$(sed '/^  clusterIP:/d' examples/services/01-kube-dns.yaml |
	kubectl create --dry-run=server -o jsonpath='{.spec.clusterIP}' -f -)
echo "  ${yellow}patched$off: the webhook assigns the reserved $ip; nothing is allocated by a dry run"
echo

echo "${bold}2. The example Services$off (examples/services/)"
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

echo "${bold}3. The Services and their ClusterIPs$off"
kubectl get services -A -o custom-columns='NAMESPACE:.metadata.namespace,NAME:.metadata.name,TYPE:.spec.type,CLUSTER-IP:.spec.clusterIP' | sed 's/^/  /'
echo

echo "${bold}4. The webhook's decisions during this demo$off (one audit line per stage and request)"
.local/bin/localcluster audit --log "$log" --from "$from" | sed 's/^/  /'
echo
cat <<EOT
${bold}Audit log$off: $log (JSON, one line per decision: grep '"admission decision"' $log | jq .)
Metrics:   $(awk '/--metrics-bind-address=/{sub(/.*--metrics-bind-address=/,""); sub(/ .*/,""); print "http://" $0 "/metrics"; exit}' "$log")
Try your own: export KUBECONFIG=.local/kubeconfig PATH=\$PWD/.local/bin:\$PATH
              kubectl create service clusterip web --tcp=80 --clusterip=10.96.0.30
Edit the policy (examples/policy.yaml, or POLICY=... make down up) and the webhook re-reads it.
Stop: make down
EOT

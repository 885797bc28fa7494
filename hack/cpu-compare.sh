#!/usr/bin/env bash
# Compares the webhook's CPU time per review with test/nopwebhook's (a Go
# webhook that allows everything, behind the same controller-runtime server
# and TLS settings), on the same certificates, over TLS on 127.0.0.1.
#
#   make up                 # etcd + kube-apiserver: ours runs against them, view synced
#   hack/cpu-compare.sh     # ROUNDS=5 DURATION=5s CONCURRENCY=8 by default
#   WEBHOOK=/tmp/old-webhook hack/cpu-compare.sh   # another build of ours (before/after)
#
# It starts one more `clusterip-policy serve` (talking to the `make up` apiserver with
# the webhook's own kubeconfig, examples/clusterippolicy.yaml, audit lines to a file)
# and one nopwebhook, waits until ours is ready, then for each round and each
# review runs test/load against ours and against nop in turn (the order
# alternates between rounds), so that a noisy neighbour hits both alike. It
# prints one row per run and, per review, the min-max over rounds of each
# webhook's CPU ms per review and of the ratio ours/nop within a round.
# Both processes are stopped on exit.
#
# The reviews: a dynamic create at the mutating and the validating stage, a
# static create (10.96.0.20), and kube-system/kube-dns created without an IP
# (the reservation owner, answered with a patch to 10.96.0.10).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-5s}
CONCURRENCY=${CONCURRENCY:-8}
cluster=.local/cluster
dir=.local/cpu-compare

if ((ROUNDS < 1 || ROUNDS > 20)); then
	echo "ROUNDS=$ROUNDS: use 1 to 20" >&2
	exit 2
fi
if [[ ! -f $cluster/webhook.kubeconfig || ! -f $cluster/webhook-certs/tls.crt ]]; then
	echo "no local cluster in $cluster: run 'make up' first (ours needs an apiserver to sync its view from)" >&2
	exit 2
fi
rm -rf "$dir"
mkdir -p "$dir"
WEBHOOK=${WEBHOOK:-}
if [[ -z $WEBHOOK ]]; then
	make -s build
	WEBHOOK=bin/clusterip-policy
fi
go build -o "$dir/nopwebhook" ./test/nopwebhook
go build -o "$dir/load" ./test/load

freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
ours_port=$(freeport) health_port=$(freeport) metrics_port=$(freeport) nop_port=$(freeport)

pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
trap cleanup EXIT

"$WEBHOOK" serve --kubeconfig="$cluster/webhook.kubeconfig" --cert-dir="$cluster/webhook-certs" \
	--bind-address=127.0.0.1 --port="$ours_port" \
	--health-probe-bind-address="127.0.0.1:$health_port" --metrics-bind-address="127.0.0.1:$metrics_port" \
	--shutdown-delay=0s --policy=examples/clusterippolicy.yaml 2>"$dir/webhook.log" &
ours_pid=$!
pids+=("$ours_pid")
"$dir/nopwebhook" --cert-dir="$cluster/webhook-certs" --bind-address=127.0.0.1 --port="$nop_port" 2>"$dir/nopwebhook.log" &
nop_pid=$!
pids+=("$nop_pid")

for i in $(seq 1 600); do # at most 120 s: a view of 100,000 IPAddresses takes 40 s to list here
	if curl -sf "http://127.0.0.1:$health_port/readyz" >/dev/null; then break; fi
	if ((i == 600)); then
		echo "ours did not become ready in 120 s; its log:" >&2
		tail -20 "$dir/webhook.log" >&2
		exit 1
	fi
	sleep 0.2
done
for i in $(seq 1 150); do
	if (exec 3<>"/dev/tcp/127.0.0.1/$nop_port") 2>/dev/null; then break; fi
	if ((i == 150)); then
		echo "nopwebhook did not listen in 30 s; its log:" >&2
		tail -20 "$dir/nopwebhook.log" >&2
		exit 1
	fi
	sleep 0.2
done

reviews=(
	"mutate-dynamic mutate-v1-service internal/admission/testdata/admissionreviews/mutate-001-create-wh-auto.json"
	"validate-dynamic validate-v1-service internal/admission/testdata/admissionreviews/validate-002-create-wh-auto.json"
	"mutate-static mutate-v1-service internal/admission/testdata/admissionreviews/mutate-003-create-wh-static.json"
	"mutate-kube-dns mutate-v1-service test/load/testdata/mutate-create-kube-dns.json"
)

# run WHO PORT PID PATH FILE: one load run, prints its summary fields.
run() {
	local out
	if ! out=$("$dir/load" --url "https://127.0.0.1:$2/$4" --ca "$cluster/webhook-certs/ca.crt" --review "$5" \
		--duration "$DURATION" --concurrency "$CONCURRENCY" --webhook-pid "$3" 2>&1); then
		echo "load against $1 failed:" >&2
		echo "$out" >&2
		exit 1
	fi
	grep '^summary:' <<<"$out" | sed 's/^summary: //'
}

results=$dir/results
: >"$results"
echo "ours: $WEBHOOK (pid $ours_pid, $(curl -s "http://127.0.0.1:$metrics_port/metrics" | awk '/^clusterip_policy_view_allocated_ips/ {print $2}') allocated IPs in its view); nop: test/nopwebhook (pid $nop_pid)"
printf '%-5s %-18s %-5s %10s %8s %8s %12s\n' round review who reviews/s p50_ms p99_ms cpu_ms/review
for round in $(seq 1 "$ROUNDS"); do
	for r in "${reviews[@]}"; do
		read -r name path file <<<"$r"
		order=(ours nop)
		if ((round % 2 == 0)); then order=(nop ours); fi
		for who in "${order[@]}"; do
			if [[ $who == ours ]]; then port=$ours_port pid=$ours_pid; else port=$nop_port pid=$nop_pid; fi
			s=$(run "$who" "$port" "$pid" "$path" "$file")
			eval "$s" # reviews_per_s= p50_ms= p99_ms= cpu_ms_per_review=
			printf '%-5s %-18s %-5s %10s %8s %8s %12s\n' "$round" "$name" "$who" "$reviews_per_s" "$p50_ms" "$p99_ms" "$cpu_ms_per_review"
			echo "$round $name $who $reviews_per_s $cpu_ms_per_review" >>"$results"
		done
	done
done

echo
echo "min-max over $ROUNDS rounds (ratio: ours/nop CPU per review within a round)"
awk '
	{ key = $1 " " $2; rps[$2 " " $3] = rps[$2 " " $3] " " $4; cpu[key " " $3] = $5; names[$2] = 1; rounds[$1] = 1 }
	function upd(k, v) { if (!(k in lo) || v < lo[k]) lo[k] = v; if (!(k in hi) || v > hi[k]) hi[k] = v }
	END {
		printf "%-18s %-21s %-21s %-15s %-15s\n", "review", "ours cpu ms/review", "nop cpu ms/review", "ratio ours/nop", "ours reviews/s"
		for (n in names) {
			for (r in rounds) {
				o = cpu[r " " n " ours"]; p = cpu[r " " n " nop"]
				upd(n " ours", o); upd(n " nop", p)
				if (p > 0) upd(n " ratio", o / p)
			}
			split(substr(rps[n " ours"], 2), a, " "); for (i in a) upd(n " rps", a[i])
			printf "%-18s %-21s %-21s %-15s %-15s\n", n,
				sprintf("%.3f-%.3f", lo[n " ours"], hi[n " ours"]), sprintf("%.3f-%.3f", lo[n " nop"], hi[n " nop"]),
				sprintf("%.2f-%.2f", lo[n " ratio"], hi[n " ratio"]), sprintf("%d-%d", lo[n " rps"], hi[n " rps"])
		}
	}' "$results"

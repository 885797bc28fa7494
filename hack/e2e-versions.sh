#!/usr/bin/env bash
# The e2e smoke subset against the oldest and the newest Kubernetes release
# this project claims (README, Chart.yaml kubeVersion): kube-apiserver and
# kubectl v1.37.2 from .local/bin (hack/build-tools.sh, tools/kube) and the
# release pinned in tools/kube-oldest from .local/k8s-<version>/bin
# (hack/build-kube-oldest.sh). Same etcd, same webhook binary, same tests.
# Each run's whole log is .local/e2e-versions/<version>.log; the table of
# test x version is printed and written to .local/e2e-versions/summary.md.
# Exits non-zero if any test fails (or is skipped) on any version.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=.local/e2e-versions
mkdir -p "$out"

# What a user relies on first: a denial (bands), an assignment (the kube-dns
# reservation), the validate stage catching a spill onto a reserved address,
# the managed matchConditions, the holds, the policy object (the chart's
# default policy source), the chart itself (whose kubeVersion helm checks
# against the apiserver), and what the policy's status says when the
# apiserver refuses the leader's write of the managed conditions. TestTheAPIServerIsTheVersionUnderTest fails when
# the binaries are not the release the run names.
smoke=(
	TestTheAPIServerIsTheVersionUnderTest
	TestStaticAndDynamicBands
	TestKubeDNSReservation
	TestSmallRangeNeverSpillsOntoTheReservedIP
	TestManagedConditionsSendOnlyWhatTheWebhookMayChange
	TestReservationHolds
	TestPolicyObject
	TestHelmChart
	TestARefusedConditionsWriteIsReported
	TestBackstopHoldsWhileTheWebhookCannotAnswer
)
run_re="^($(IFS='|'; echo "${smoke[*]}"))\$"

newest=$(cd tools/kube && go list -m -f '{{.Version}}' k8s.io/kubernetes)
oldest=$(cd tools/kube-oldest && go list -m -f '{{.Version}}' k8s.io/kubernetes)
declare -A dirs=([$newest]=$root/.local/bin [$oldest]=$root/.local/k8s-$oldest/bin)
# E2E_VERSIONS picks the runs: "oldest newest" (the default), or one of them.
versions=()
for which in ${E2E_VERSIONS:-oldest newest}; do
	case $which in
	oldest) versions+=("$oldest") ;;
	newest) versions+=("$newest") ;;
	*)
		echo "e2e-versions: E2E_VERSIONS=\"${E2E_VERSIONS}\": each word must be oldest or newest" >&2
		exit 2
		;;
	esac
done

rc=0
declare -A result secs
for v in "${versions[@]}"; do
	log=$out/$v.log
	echo "e2e-versions: $v (E2E_BIN_DIR=${dirs[$v]}) ..."
	start=$SECONDS
	set +e
	E2E_BIN_DIR=${dirs[$v]} E2E_KUBE_VERSION=$v go test -tags e2e -count=1 -timeout 30m -v -run "$run_re" ./test/e2e/ >"$log" 2>&1
	code=$?
	set -e
	secs[$v]=$((SECONDS - start))
	grep -E '^(--- |FAIL|ok|panic)|e2e: versions' "$log" || true
	echo "e2e-versions: $v: go test exit $code in ${secs[$v]}s (log $log)"
	((code == 0)) || rc=1
	for t in "${smoke[@]}"; do
		line=$(grep -E "^--- (PASS|FAIL|SKIP): $t " "$log" | head -1 || true)
		if [[ -z $line ]]; then
			result[$v,$t]="not run"
			rc=1
			continue
		fi
		status=${line#--- }; status=${status%%:*}
		dur=${line##*(}; dur=${dur%)}
		[[ $status == PASS ]] || rc=1
		result[$v,$t]="$status $dur"
	done
done

{
	echo "| test | ${versions[*]/%/ |}"
	printf '|---|'; for _ in "${versions[@]}"; do printf -- '---|'; done; echo
	for t in "${smoke[@]}"; do
		printf '| %s |' "$t"
		for v in "${versions[@]}"; do printf ' %s |' "${result[$v,$t]}"; done
		echo
	done
	printf '| whole run (go test, with cluster starts) |'
	for v in "${versions[@]}"; do printf ' %ss |' "${secs[$v]}"; done
	echo
} >"$out/summary.md"
cat "$out/summary.md"
exit $rc

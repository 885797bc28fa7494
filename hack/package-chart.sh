#!/usr/bin/env bash
# Packages charts/clusterip-policy with the image pinned in its values:
#   hack/package-chart.sh IMAGE_REPO VERSION DIGEST OUTDIR
# writes OUTDIR/clusterip-policy-${VERSION#v}.tgz (chart version VERSION
# without the v, appVersion VERSION) and checks the package: helm lint, the
# version/appVersion, and the image the Deployment renders
# (IMAGE_REPO:VERSION@DIGEST). Used by make release and by the e2e test that
# installs the chart from a registry (test/e2e/registry_test.go).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
HELM=${HELM:-$root/.local/bin/helm}
if (($# != 4)); then
	echo "usage: $0 IMAGE_REPO VERSION DIGEST OUTDIR" >&2
	exit 2
fi
repo=$1 version=$2 digest=$3 out=$4
if [[ ! $version =~ ^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]]; then
	echo "package-chart: VERSION $version is not vMAJOR.MINOR.PATCH[-PRERELEASE] (semver with a v)" >&2
	exit 2
fi
if [[ ! $digest =~ ^sha256:[0-9a-f]{64}$ ]]; then
	echo "package-chart: DIGEST $digest is not sha256:<64 hex digits>" >&2
	exit 2
fi
if [[ ! -x $HELM ]]; then
	echo "package-chart: $HELM is missing (run make tools)" >&2
	exit 2
fi
chart_version=${version#v}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -r "$root/charts/clusterip-policy" "$tmp/"
values=$tmp/clusterip-policy/values.yaml
for line in '^  repository: clusterip-policy$' '^  tag: dev$' '^  digest: ""$'; do
	grep -q "$line" "$values" || {
		echo "package-chart: charts/clusterip-policy/values.yaml has no line matching $line, which this script rewrites; update hack/package-chart.sh" >&2
		exit 1
	}
done
sed -i "s#^  repository: clusterip-policy\$#  repository: $repo#; s#^  tag: dev\$#  tag: $version#; s#^  digest: \"\"\$#  digest: $digest#" "$values"
# The checks render the chart without a cluster: helm then assumes
# Kubernetes v1.20 (give the oldest the chart accepts) and cannot read the DNS
# Service the chart otherwise looks up (give any address: only the image
# line is read).
kube=$(sed -n 's/^kubeVersion: ">=\([0-9.]*\)-0"$/\1/p' "$tmp/clusterip-policy/Chart.yaml")
if [[ -z $kube ]]; then
	echo "package-chart: Chart.yaml has no kubeVersion of the form \">=X.Y.Z-0\"" >&2
	exit 1
fi
render=(--kube-version "$kube" --set dns.clusterIP=10.96.0.10)
"$HELM" lint --namespace clusterip-policy "${render[@]}" "$tmp/clusterip-policy" >/dev/null
mkdir -p "$out"
"$HELM" package "$tmp/clusterip-policy" --version "$chart_version" --app-version "$version" -d "$out" >/dev/null
pkg=$out/clusterip-policy-$chart_version.tgz

got=$("$HELM" show chart "$pkg" | sed -n 's/^version: //p;s/^appVersion: //p' | sort | tr '\n' ' ')
want=$(printf '%s\n' "$chart_version" "$version" | sort | tr '\n' ' ')
if [[ $got != "$want" ]]; then
	echo "package-chart: the package says version/appVersion '$got', want '$want'" >&2
	exit 1
fi
image=$("$HELM" template x "$pkg" --namespace clusterip-policy "${render[@]}" | sed -n 's/^ *image: "\(.*\)"$/\1/p' | sort -u)
if [[ $image != "$repo:$version@$digest" ]]; then
	echo "package-chart: the package renders image '$image', want $repo:$version@$digest" >&2
	exit 1
fi
echo "$pkg"

#!/usr/bin/env bash
# Assembles a release into _output/release/ (make release; docs/release.md):
#   clusterip-policy-VERSION.oci.tar         the multi-arch image, an OCI layout as a tar
#   clusterip-policy-VERSION.spdx.json       its SBOM
#   clusterip-policy-CHARTVERSION.tgz        the chart; values name the image by tag and digest
#   clusterip-policy-VERSION-OS-ARCH         the CLI for linux/darwin on amd64/arm64
#   kubectl-clusterip_policy-VERSION-OS-ARCH.tar.gz  the same, as the kubectl plugin
#   SHA256SUMS                               of all of the above
# It runs after hack/image.sh (make release depends on make image) and
# checks what it produced: the chart's version and appVersion, the digest
# in its values and in the rendered Deployment.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

: "${VERSION:?VERSION is not set (make release sets it)}"
: "${COMMIT:?COMMIT is not set}"
IMAGE_REPO=${IMAGE_REPO:-clusterip-policy}
HELM=${HELM:-$root/.local/bin/helm}
OUT=${OUT:-_output/release}
IMAGE_OUT=${IMAGE_OUT:-_output/image}
imagebuild=_output/tools/imagebuild

if [[ ! $VERSION =~ ^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]]; then
	echo "release: VERSION $VERSION is not vMAJOR.MINOR.PATCH[-PRERELEASE] (semver with a v)" >&2
	exit 2
fi
release_version=$(cat VERSION)
declared=$(sed -n 's/^version: *//p' charts/clusterip-policy/Chart.yaml)
if [[ $declared != "${release_version#v}" ]]; then
	echo "release: charts/clusterip-policy/Chart.yaml says version $declared, the VERSION file $release_version; make them agree" >&2
	exit 2
fi
if [[ ! -x $HELM ]]; then
	echo "release: $HELM is missing (run make tools)" >&2
	exit 2
fi

rm -rf "$OUT"
mkdir -p "$OUT"
digest=$("$imagebuild" digest --layout "$IMAGE_OUT/clusterip-policy")
cp "$IMAGE_OUT/clusterip-policy.oci.tar" "$OUT/clusterip-policy-$VERSION.oci.tar"
cp "$IMAGE_OUT/clusterip-policy.spdx.json" "$OUT/clusterip-policy-$VERSION.spdx.json"

# The CLI: review and audit are what users run in CI, on their laptops too.
# The linux ones are the very binaries in the image (hack/image.sh built
# them with the same flags); darwin is built here the same way.
# The kubectl plugin (kubectl clusterip-policy): the same binary, named
# kubectl-clusterip_policy as kubectl finds plugins on the PATH, with the
# LICENSE, in the archive krew installs; its help then says "kubectl
# clusterip-policy" (internal/cli.DisplayName). Reproducible: fixed owner,
# times and order, gzip without a name or time.
plugin_archive() {
	tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
		--transform='s,.*/,,;s,^clusterip-policy-.*,kubectl-clusterip_policy,' \
		-cf - LICENSE "$1" | gzip -9n >"$2"
}
ldflags="-s -w -X clusterip-policy/internal/version.version=$VERSION -X clusterip-policy/internal/version.commit=$COMMIT"
for arch in amd64 arm64; do
	cp "_output/bin/linux_$arch/clusterip-policy" "$OUT/clusterip-policy-$VERSION-linux-$arch"
	CGO_ENABLED=0 GOOS=darwin GOARCH=$arch go build -trimpath -ldflags "$ldflags" \
		-o "$OUT/clusterip-policy-$VERSION-darwin-$arch" ./cmd/webhook
	for os in linux darwin; do
		plugin_archive "$OUT/clusterip-policy-$VERSION-$os-$arch" "$OUT/kubectl-clusterip_policy-$VERSION-$os-$arch.tar.gz"
	done
done

# The chart, with the image pinned by digest in its values (checked there).
HELM=$HELM hack/package-chart.sh "$IMAGE_REPO" "$VERSION" "$digest" "$OUT" >/dev/null

(cd "$OUT" && sha256sum -- * >SHA256SUMS)
echo "release $VERSION (commit $COMMIT) in $OUT:"
echo "  image $IMAGE_REPO:$VERSION@$digest"
(cd "$OUT" && ls -l --time-style=+ -- * | awk '{print "  " $5 "\t" $NF}')

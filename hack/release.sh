#!/usr/bin/env bash
# Assembles a release into _output/release/ (make release; docs/release.md):
#   clusterip-policy-VERSION.oci.tar         the multi-arch image, an OCI layout as a tar
#   clusterip-policy-VERSION.spdx.json       its SBOM
#   clusterip-policy-CHARTVERSION.tgz        the chart; values name the image by tag and digest
#   clusterip-policy-VERSION-OS-ARCH         the CLI for linux/darwin on amd64/arm64
#   kubectl-clusterip_policy-VERSION-OS-ARCH.tar.gz  the same, as the kubectl plugin,
#                                            with its completion helper
#   clusterip-policy.yaml                    the krew manifest of those archives
#   install.yaml                             manifests/base rendered with the image
#                                            digest, for kubectl apply
#   install-crd.yaml                         its CRD alone, applied first
#   SHA256SUMS                               of all of the above
# Signing needs the image and chart in a registry: docs/release.md, "Signing".
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
KUBECTL=${KUBECTL:-$root/.local/bin/kubectl}
# Where the plugin archives will be downloadable (the krew manifest's uri);
# make release sets it.
: "${RELEASE_URL:?RELEASE_URL is not set: where the release files will be downloadable (make release RELEASE_URL=https://...)}"
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
if [[ ! $RELEASE_URL =~ ^https://[^/?#[:space:]]+(/[^?#[:space:]]*)?$ ]]; then
	echo "release: RELEASE_URL $RELEASE_URL is not an https:// URL of a directory (no query, no spaces); krew downloads the plugin archives from RELEASE_URL/NAME" >&2
	exit 2
fi
RELEASE_URL=${RELEASE_URL%/}
for tool in "$HELM" "$KUBECTL"; do
	if [[ ! -x $tool ]]; then
		echo "release: $tool is missing (run make release-tools)" >&2
		exit 2
	fi
done

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
# clusterip-policy" (internal/cli.DisplayName). Beside it
# kubectl_complete-clusterip_policy, which kubectl 1.26+ runs to complete
# `kubectl clusterip-policy <TAB>`. Reproducible: fixed owner, modes, times
# and order, gzip without a name or time.
plugin_archive() {
	tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --mode=a+rX,u+w,go-w \
		--transform='s,.*/,,;s,^clusterip-policy-.*,kubectl-clusterip_policy,' \
		-cf - LICENSE hack/kubectl_complete-clusterip_policy "$1" | gzip -9n >"$2"
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

# The krew manifest (krew-index's plugins/clusterip-policy.yaml): one
# platform per archive, with its SHA-256; the release check installs the
# plugin with krew from it.
{
	cat <<-EOF
		apiVersion: krew.googlecontainertools.github.com/v1alpha2
		kind: Plugin
		metadata:
		  name: clusterip-policy
		spec:
		  version: $VERSION
		  shortDescription: Check Service ClusterIPs against a ClusterIPPolicy
		  description: |
		    Reviews Service manifests offline as the clusterip-policy admission
		    webhook would, audits the Services of a cluster against its policy,
		    and prints the address bands and free addresses of each range.
		  platforms:
	EOF
	for os in darwin linux; do
		for arch in amd64 arm64; do
			archive=kubectl-clusterip_policy-$VERSION-$os-$arch.tar.gz
			sum=$(sha256sum "$OUT/$archive")
			cat <<-EOF
				  - selector:
				      matchLabels:
				        os: $os
				        arch: $arch
				    uri: $RELEASE_URL/$archive
				    sha256: ${sum%% *}
				    files:
				    - from: kubectl-clusterip_policy
				      to: .
				    - from: kubectl_complete-clusterip_policy
				      to: .
				    - from: LICENSE
				      to: .
				    bin: kubectl-clusterip_policy
			EOF
		done
	done
} >"$OUT/clusterip-policy.yaml"

# install.yaml for kubectl-only users: manifests/base (the webhook makes its
# own certificate, so the file holds no key and suits every cluster) with the
# image pinned by digest; install-crd.yaml the CRD alone, applied first
# (kubectl maps every object of a file before applying any, label selector
# or not, so the policy object needs its CRD established beforehand).
# docs/release.md says why the chart is not rendered instead.
render=$(mktemp -d "$root/_output/install.XXXXXX")
trap 'rm -rf "$render"' EXIT
cat >"$render/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- ../../manifests/base
images:
- name: clusterip-policy
  newName: $IMAGE_REPO
  newTag: $VERSION
  digest: $digest
EOF
{
	echo "# clusterip-policy $VERSION (commit $COMMIT): manifests/base with the image"
	echo "# $IMAGE_REPO:$VERSION@$digest. How to apply it: docs/release.md."
	"$KUBECTL" kustomize "$render"
} >"$OUT/install.yaml"
cp manifests/base/crd.yaml "$OUT/install-crd.yaml"
image=$(sed -n 's/^ *image: //p' "$OUT/install.yaml" | sort -u)
if [[ $image != "$IMAGE_REPO:$VERSION@$digest" ]]; then
	echo "release: install.yaml runs image '$image', want $IMAGE_REPO:$VERSION@$digest" >&2
	exit 1
fi

(cd "$OUT" && sha256sum -- * >SHA256SUMS)
echo "release $VERSION (commit $COMMIT) in $OUT:"
echo "  image $IMAGE_REPO:$VERSION@$digest"
(cd "$OUT" && ls -l --time-style=+ -- * | awk '{print "  " $5 "\t" $NF}')

#!/usr/bin/env bash
# Builds the container images without a Docker engine (make image):
#   _output/image/clusterip-policy/   OCI layout: one index, linux/amd64 + linux/arm64
#   _output/image/clusterip-policy.oci.tar   the same layout as a tar
#   _output/image/clusterip-policy.spdx.json the SBOM (SPDX 2.3, from the binaries' Go build information)
#   _output/image/pause/              a pod sandbox image, so a local node pulls nothing from outside
# and prints each index digest. The binaries are static (CGO_ENABLED=0),
# -trimpath, stamped with VERSION and COMMIT; every time in the image is the
# commit's time (SOURCE_DATE_EPOCH), so two builds of one commit give one
# digest. After building, it copies the amd64 binary back out of the image
# and checks that `clusterip-policy version` prints the stamped values.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

: "${VERSION:?VERSION is not set (make image sets it from the VERSION file)}"
: "${COMMIT:?COMMIT is not set}"
OUT=${OUT:-_output/image}
BIN_OUT=${BIN_OUT:-_output/bin}
PLATFORMS=${PLATFORMS:-linux/amd64 linux/arm64}
if [[ -z ${SOURCE_DATE_EPOCH:-} ]]; then
	SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null) || {
		echo "image: not a git checkout and SOURCE_DATE_EPOCH is not set; set it to the source's time in seconds" >&2
		exit 2
	}
fi
if [[ ! $SOURCE_DATE_EPOCH =~ ^[0-9]+$ ]]; then
	echo "image: SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH is not seconds since 1970; unset it to use the commit's time (git log -1 --format=%ct)" >&2
	exit 2
fi
export SOURCE_DATE_EPOCH

mkdir -p "$OUT" "$BIN_OUT" _output/tools
imagebuild=_output/tools/imagebuild
(cd tools/imagebuild && CGO_ENABLED=0 go build -trimpath -o "$root/$imagebuild" .)

ldflags="-s -w -X clusterip-policy/internal/version.version=$VERSION -X clusterip-policy/internal/version.commit=$COMMIT"
bins=() pause_bins=()
for p in $PLATFORMS; do
	os=${p%/*} arch=${p#*/}
	dir=$BIN_OUT/${os}_$arch
	mkdir -p "$dir"
	CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -ldflags "$ldflags" -o "$dir/clusterip-policy" ./cmd/webhook
	# Built from tools/imagebuild's module: the output path must not depend
	# on that directory (BIN_OUT may be relative to the root or absolute).
	pause_out=$dir/pause
	[[ $pause_out == /* ]] || pause_out=$root/$pause_out
	(cd tools/imagebuild && CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -ldflags "-s -w" -o "$pause_out" ./pause)
	bins+=(--binary "$p=$dir/clusterip-policy")
	pause_bins+=(--binary "$p=$dir/pause")
done

created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
labels=(
	--label "org.opencontainers.image.title=clusterip-policy"
	--label "org.opencontainers.image.description=Admission webhook that keeps Service ClusterIPs where a policy says"
	--label "org.opencontainers.image.version=$VERSION"
	--label "org.opencontainers.image.revision=$COMMIT"
	--label "org.opencontainers.image.created=$created"
	--label "org.opencontainers.image.licenses=Apache-2.0"
)
"$imagebuild" build --out "$OUT/clusterip-policy" --tar "$OUT/clusterip-policy.oci.tar" \
	--sbom "$OUT/clusterip-policy.spdx.json" --name clusterip-policy --tag "$VERSION" \
	--entrypoint /clusterip-policy --user 65532:65532 "${bins[@]}" \
	--file /licenses/LICENSE=LICENSE "${labels[@]}"
# The pause image runs as 65535 like registry.k8s.io/pause.
"$imagebuild" build --out "$OUT/pause" --name pause --tag "$VERSION" \
	--entrypoint /pause --user 65535:65535 "${pause_bins[@]}" \
	--label "org.opencontainers.image.title=pause" --label "org.opencontainers.image.revision=$COMMIT"

# Run what the image holds, not what it was made from.
case $(uname -m) in x86_64) host=linux/amd64 ;; aarch64) host=linux/arm64 ;; *) host= ;; esac
if [[ -n $host && " $PLATFORMS " == *" $host "* ]]; then
	check=_output/tools/clusterip-policy.from-image
	"$imagebuild" extract --layout "$OUT/clusterip-policy" --platform "$host" --path /clusterip-policy --out "$check"
	v=$("$check" version)
	echo "image: the $host image's /clusterip-policy says: $v"
	if [[ $v != *" $VERSION "* || $v != *"(commit $COMMIT,"* ]]; then
		echo "image: the binary in the image does not carry VERSION=$VERSION COMMIT=$COMMIT" >&2
		exit 1
	fi
fi

#!/usr/bin/env bash
# Builds the binaries the end-to-end tests and the demo run: etcd, kube-apiserver,
# kubectl, helm, controller-gen, helm-docs and crd-ref-docs (and, for the
# release check, cosign and krew) from their Go modules at the versions pinned in tools/*/go.mod.
# A binary is rebuilt only when its pinned version (recorded in a stamp file
# beside it) differs, so a warm run costs a second; the cold build times are in
# BENCHMARKS.md, "How long CI takes".
# `hack/build-tools.sh node` (make node-tools) builds only the real node's
# kubelet, kube-scheduler and kube-controller-manager from the same module
# (hack/node-up.sh); the other targets never need them.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${BIN_DIR:-$root/.local/bin}
mkdir -p "$bin"

k8s_version=$(cd "$root/tools/kube" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
etcd_version=$(cd "$root/tools/etcd" && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
helm_version=$(cd "$root/tools/helm" && go list -m -f '{{.Version}}' helm.sh/helm/v3)
controller_gen_version=$(cd "$root/tools/controller-gen" && go list -m -f '{{.Version}}' sigs.k8s.io/controller-tools)
helm_docs_version=$(cd "$root/tools/helm-docs" && go list -m -f '{{.Version}}' github.com/norwoodj/helm-docs)
crd_ref_docs_version=$(cd "$root/tools/crd-ref-docs" && go list -m -f '{{.Version}}' github.com/elastic/crd-ref-docs)
cosign_version=$(cd "$root/tools/cosign" && go list -m -f '{{.Version}}' github.com/sigstore/cosign/v3)
krew_version=$(cd "$root/tools/krew" && go list -m -f '{{.Version}}' sigs.k8s.io/krew)
minor=${k8s_version#v1.}; minor=${minor%%.*}

# shellcheck source=hack/tools-cache.sh
source "$root/hack/tools-cache.sh"

# build NAME VERSION MODULE_DIR PACKAGE [LDFLAGS]
build() {
	local name=$1 version=$2 dir=$3 pkg=$4 ldflags=${5:-}
	local stamp="$bin/.$name.version"
	if [[ -x "$bin/$name" && -f "$stamp" && "$(cat "$stamp")" == "$version" ]]; then
		echo "$name $version: up to date"
		to_cache "$name" "$version" "$bin/$name"
		return
	fi
	if from_cache "$name" "$version" "$bin/$name"; then
		echo "$version" >"$stamp"
		echo "$name $version: copied from $cache"
		return
	fi
	echo "building $name $version ..."
	local start=$SECONDS
	(cd "$dir" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w $ldflags" -o "$bin/$name" "$pkg")
	echo "$version" >"$stamp"
	to_cache "$name" "$version" "$bin/$name"
	echo "built $name $version in $((SECONDS - start))s"
}

# kubectl and the apiserver refuse to parse an empty version, so stamp the
# release into component-base the way Kubernetes' own build does.
vpkg=k8s.io/component-base/version
k8s_ldflags="-X $vpkg.gitVersion=$k8s_version -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$minor -X $vpkg.gitTreeState=clean"

if [[ "${1:-}" == node ]]; then
	for cmd in kubelet kube-scheduler kube-controller-manager; do
		build "$cmd" "$k8s_version" "$root/tools/kube" "k8s.io/kubernetes/cmd/$cmd" "$k8s_ldflags"
	done
	exit 0
fi

# `hack/build-tools.sh release` (make release) builds only helm and
# kubectl: the release packages the chart with helm and renders install.yaml
# with kubectl kustomize.
if [[ "${1:-}" == release ]]; then
	build helm "$helm_version" "$root/tools/helm" helm.sh/helm/v3/cmd/helm "-X helm.sh/helm/v3/internal/version.version=$helm_version"
	build kubectl "$k8s_version" "$root/tools/kube" k8s.io/kubernetes/cmd/kubectl "$k8s_ldflags"
	exit 0
fi
# `hack/build-tools.sh release-check` (make release-check) builds cosign,
# which signs and verifies the release (docs/release.md, "Signing"), and
# krew, which installs the plugin from the release's krew manifest. Both
# print their version from the module's variables; stamp them the same way.
if [[ "${1:-}" == release-check ]]; then
	build cosign "$cosign_version" "$root/tools/cosign" github.com/sigstore/cosign/v3/cmd/cosign "-X sigs.k8s.io/release-utils/version.gitVersion=$cosign_version"
	build krew "$krew_version" "$root/tools/krew" sigs.k8s.io/krew/cmd/krew "-X sigs.k8s.io/krew/internal/version.gitTag=$krew_version"
	exit 0
fi

build etcd "$etcd_version" "$root/tools/etcd" ./cmd/etcd
build kube-apiserver "$k8s_version" "$root/tools/kube" k8s.io/kubernetes/cmd/kube-apiserver "$k8s_ldflags"
build kubectl "$k8s_version" "$root/tools/kube" k8s.io/kubernetes/cmd/kubectl "$k8s_ldflags"
# helm prints its version from internal/version; stamp the release the same way.
build helm "$helm_version" "$root/tools/helm" helm.sh/helm/v3/cmd/helm "-X helm.sh/helm/v3/internal/version.version=$helm_version"
# controller-gen generates the ClusterIPPolicy CRD (hack/generate-crd.sh); its
# version is stamped into the CRD's annotation from the module's build info.
build controller-gen "$controller_gen_version" "$root/tools/controller-gen" sigs.k8s.io/controller-tools/cmd/controller-gen
# helm-docs writes the chart's README.md from values.yaml (hack/generate-chart-readme.sh).
build helm-docs "$helm_docs_version" "$root/tools/helm-docs" github.com/norwoodj/helm-docs/cmd/helm-docs
# crd-ref-docs writes docs/api.md from the API's Go types (hack/generate-api-doc.sh).
build crd-ref-docs "$crd_ref_docs_version" "$root/tools/crd-ref-docs" github.com/elastic/crd-ref-docs

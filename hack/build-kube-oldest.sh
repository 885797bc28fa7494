#!/usr/bin/env bash
# Builds kube-apiserver and kubectl of the oldest Kubernetes release this
# project is tested against (tools/kube-oldest/go.mod) into
# .local/k8s-<version>/bin, beside links to the etcd and helm that
# hack/build-tools.sh builds (the e2e harness takes them all from one
# directory, E2E_BIN_DIR).
# The same etcd serves every apiserver version we test, as an upgraded
# cluster keeps its etcd. Cached as hack/build-tools.sh caches: rebuilt only
# when the pinned version differs from the stamp beside the binary, and
# copied from the tools cache outside the clone when built there before. The last
# line printed is the directory.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mod=$root/tools/kube-oldest
version=$(cd "$mod" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
minor=${version#v1.}; minor=${minor%%.*}
bin=$root/.local/k8s-$version/bin
mkdir -p "$bin"
# shellcheck source=hack/tools-cache.sh
source "$root/hack/tools-cache.sh"

# helm is a client: TestHelmChart finds it beside kubectl.
for tool in etcd helm; do
	if [[ ! -x $root/.local/bin/$tool ]]; then
		echo "build-kube-oldest: $root/.local/bin/$tool is missing; run \`make tools\` first" >&2
		exit 1
	fi
	ln -sf "$root/.local/bin/$tool" "$bin/$tool"
done

# kubectl and the apiserver refuse to parse an empty version, so stamp the
# release into component-base the way Kubernetes' own build does.
vpkg=k8s.io/component-base/version
ldflags="-s -w -X $vpkg.gitVersion=$version -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$minor -X $vpkg.gitTreeState=clean"
for name in kube-apiserver kubectl; do
	stamp=$bin/.$name.version
	if [[ -x $bin/$name && -f $stamp && $(cat "$stamp") == "$version" ]]; then
		echo "$name $version: up to date"
		to_cache "$name" "$version" "$bin/$name"
		continue
	fi
	if from_cache "$name" "$version" "$bin/$name"; then
		echo "$version" >"$stamp"
		echo "$name $version: copied from $cache"
		continue
	fi
	echo "building $name $version ..."
	start=$SECONDS
	(cd "$mod" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$bin/$name" "k8s.io/kubernetes/cmd/$name")
	echo "$version" >"$stamp"
	to_cache "$name" "$version" "$bin/$name"
	echo "built $name $version in $((SECONDS - start))s"
done
echo "$bin"

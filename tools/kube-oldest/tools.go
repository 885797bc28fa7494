//go:build tools

// Package tools pins the commands hack/build-kube-oldest.sh builds from this
// module: the oldest kube-apiserver (and its kubectl) the e2e smoke subset
// runs against.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)

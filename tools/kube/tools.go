//go:build tools

// Package tools pins the commands the end-to-end harness builds with
// `go build k8s.io/kubernetes/cmd/kube-apiserver` from this module; the
// kubelet, scheduler and controller-manager are the real node's
// (hack/node-up.sh), built only by `make node-tools`.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)

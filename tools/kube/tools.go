//go:build tools

// Package tools pins the commands the end-to-end harness builds with
// `go build k8s.io/kubernetes/cmd/kube-apiserver` from this module.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)

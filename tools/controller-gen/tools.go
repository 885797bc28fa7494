//go:build tools

// Package tools pins controller-gen so `go build
// sigs.k8s.io/controller-tools/cmd/controller-gen` resolves from this go.mod
// (see hack/build-tools.sh). It generates the ClusterIPPolicy CRD from the
// commented Go types in pkg/apis/clusterippolicy/v1alpha1 (make generate).
package tools

import _ "sigs.k8s.io/controller-tools/cmd/controller-gen"

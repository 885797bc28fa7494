//go:build tools

// Package tools pins crd-ref-docs so `go build github.com/elastic/crd-ref-docs`
// resolves from this go.mod (see hack/build-tools.sh). It writes docs/api.md,
// the ClusterIPPolicy API reference, from the commented Go types of
// pkg/apis/clusterippolicy/v1alpha1 (make generate).
package tools

import _ "github.com/elastic/crd-ref-docs"

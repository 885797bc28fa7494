//go:build tools

// Package tools pins the helm CLI module so `go build helm.sh/helm/v3/cmd/helm`
// resolves from this go.mod (see hack/build-tools.sh).
package tools

import _ "helm.sh/helm/v3/cmd/helm"

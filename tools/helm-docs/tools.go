//go:build tools

// Package tools pins helm-docs so `go build
// github.com/norwoodj/helm-docs/cmd/helm-docs` resolves from this go.mod (see
// hack/build-tools.sh). It writes charts/clusterip-policy/README.md from the
// comments in values.yaml (make generate).
package tools

import _ "github.com/norwoodj/helm-docs/cmd/helm-docs"

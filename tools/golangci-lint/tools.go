//go:build tools

// CI tooling only: golangci-lint v2, pinned by this go.mod and built from its
// Go module (hack/lint.sh), so the lint needs only the Go module proxy. Kept
// apart from the product's go.mod.
package tools

import _ "github.com/golangci/golangci-lint/v2/cmd/golangci-lint"

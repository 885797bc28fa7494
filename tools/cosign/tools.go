//go:build tools

// Package tools pins the cosign CLI module so `go build
// github.com/sigstore/cosign/v3/cmd/cosign` resolves from this go.mod (see
// hack/build-tools.sh).
package tools

import _ "github.com/sigstore/cosign/v3/cmd/cosign"

//go:build tools

// Package tools pins the krew CLI module so `go build sigs.k8s.io/krew/cmd/krew`
// resolves from this go.mod (see hack/build-tools.sh).
package tools

import _ "sigs.k8s.io/krew/cmd/krew"

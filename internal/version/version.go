// Package version is the build's version and commit, stamped at link time
// by `make build`, hack/image.sh and hack/release.sh:
//
//	-X clusterip-policy/internal/version.version=v0.1.0 -X clusterip-policy/internal/version.commit=7794ab7
//
// The server logs it at start and sends it as its User-Agent, the audit
// command likewise, and `clusterip-policy version` prints it.
package version

import (
	"fmt"
	"runtime"
)

var (
	version = "dev"
	commit  = "unknown"
)

// Version is the release (VERSION, or VERSION-dev off a release tag).
func Version() string { return version }

// Commit is the short commit hash, with -dirty for a tree with changes.
func Commit() string { return commit }

// String is what `clusterip-policy version` prints.
func String() string {
	return fmt.Sprintf("clusterip-policy webhook %s (commit %s, %s, %s/%s)", version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

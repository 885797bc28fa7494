//go:build tools

// Package tools pins the commands hack/vulncheck.sh builds: govulncheck and
// vulndb's indexdb, which turns the module's data/osv/*.json into the
// database layout govulncheck reads with -db file:///DIR.
package tools

import (
	_ "golang.org/x/vuln/cmd/govulncheck"
	_ "golang.org/x/vulndb/cmd/indexdb"
)

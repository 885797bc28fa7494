package policy

import (
	"fmt"
	"io"
	"os"
)

// Limits on the policy file, checked at load so that a mistaken or hostile
// file is refused with a clear error instead of slowing every review: each
// review scans the exemption lists, and messages name ranges and bands.
const (
	// MaxPolicyBytes is the largest policy file: a ConfigMap holds at most
	// 1 MiB, and the file is mounted from one.
	MaxPolicyBytes = 1 << 20
	// MaxPolicyCIDRs bounds serviceCIDRs and allowedCIDRs each.
	MaxPolicyCIDRs = 64
	// MaxReservations bounds reservations.
	MaxReservations = 10000
	// MaxExemptions bounds exemptions.namespaces, .users and .groups each.
	MaxExemptions = 1000
)

// readBounded reads at most max bytes of path, and refuses a larger file
// without reading it all.
func readBounded(path string, max int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, int64(max)+1))
	if err != nil {
		return nil, err
	}
	if len(data) > max {
		return nil, fmt.Errorf("%s: the file is larger than the limit of %d bytes (1 MiB, a ConfigMap's limit); keep reservations and exemptions to what the cluster needs", path, max)
	}
	return data, nil
}

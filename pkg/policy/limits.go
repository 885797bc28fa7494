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

// checkCounts refuses a file whose lists are longer than the limits.
func checkCounts(f File, ln lines) error {
	for _, c := range []struct {
		path []any
		n    int
		max  int
	}{
		{[]any{"serviceCIDRs"}, len(f.ServiceCIDRs), MaxPolicyCIDRs},
		{[]any{"allowedCIDRs"}, len(f.AllowedCIDRs), MaxPolicyCIDRs},
		{[]any{"reservations"}, len(f.Reservations), MaxReservations},
		{[]any{"reservedRanges"}, len(f.ReservedRanges), MaxReservedRanges},
		{[]any{"exemptions", "namespaces"}, len(f.Exemptions.Namespaces), MaxExemptions},
		{[]any{"exemptions", "users"}, len(f.Exemptions.Users), MaxExemptions},
		{[]any{"exemptions", "groups"}, len(f.Exemptions.Groups), MaxExemptions},
	} {
		if c.n > c.max {
			name := fmt.Sprint(c.path[0])
			if len(c.path) > 1 {
				name += "." + fmt.Sprint(c.path[1])
			}
			return fmt.Errorf("%s (line %d): %d entries, more than the limit of %d; list what the cluster needs (a CIDR covers many addresses, a group many users)", name, ln.at(c.path...), c.n, c.max)
		}
	}
	return nil
}

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

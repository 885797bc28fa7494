package policy

import (
	"reflect"
	"testing"
)

func TestSplitNewerFields(t *testing.T) {
	tests := []struct {
		name, spec, known string
		newer             []string
	}{
		{"nothing newer keeps the bytes", `{"allowedCIDRs":["10.96.0.0/16"]}`, `{"allowedCIDRs":["10.96.0.0/16"]}`, nil},
		{"empty", ``, ``, nil},
		{"top level", `{"x":1,"allowedCIDRs":[]}`, `{"allowedCIDRs":[]}`, []string{"spec.x"}},
		{"in a list entry and a selector", `{"reservedRanges":[{"cidr":"10.96.1.0/28","serviceSelector":{"matchLabels":{"a":"b"},"y":2}}],"exemptions":{"z":[]}}`,
			`{"exemptions":{},"reservedRanges":[{"cidr":"10.96.1.0/28","serviceSelector":{"matchLabels":{"a":"b"}}}]}`,
			[]string{"spec.exemptions.z", "spec.reservedRanges[0].serviceSelector.y"}},
		{"maps are kept whole", `{"enforcement":{"rules":{"any-name":"warn"}}}`, `{"enforcement":{"rules":{"any-name":"warn"}}}`, nil},
		// apiVersion and kind are refused by ParseObjectSpec with its own
		// message, never dropped as newer.
		{"apiVersion is left to the loader", `{"apiVersion":"v"}`, `{"apiVersion":"v"}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			known, newer, err := SplitNewerFields([]byte(tt.spec))
			if err != nil || string(known) != tt.known || !reflect.DeepEqual(newer, tt.newer) {
				t.Fatalf("got %s %q %v; want %s %q", known, newer, err, tt.known, tt.newer)
			}
		})
	}
	// The loader still reads a policy file strictly: there an unknown field
	// is a typo.
	if _, err := Parse([]byte("apiVersion: " + APIVersion + "\nkind: " + Kind + "\nallowedCIDR: []\n")); err == nil {
		t.Fatal("Parse accepted an unknown field")
	}
}

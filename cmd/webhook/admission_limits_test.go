package main

import (
	"encoding/json"
	"fmt"
	"testing"
)

func TestListHeadCountsWithoutDecodingTheRest(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		head string
	}{
		{`[]`, 0, `[]`},
		{`[ ]`, 0, `[]`},
		{`null`, 0, `[]`},
		{`["10.96.0.5"]`, 1, `["10.96.0.5"]`},
		{`["a","b","c","d"]`, 4, `["a" "b"]`},
		{`[ "a,b" , "c\",[" , "d" ]`, 3, `["a,b" "c\",["]`},
		{`["a\\","b","c"]`, 3, `["a\\" "b"]`},
	}
	for _, tt := range tests {
		var l struct {
			L listHead `json:"l"`
		}
		if err := json.Unmarshal([]byte(`{"l":`+tt.in+`}`), &l); err != nil {
			t.Fatalf("%s: %v", tt.in, err)
		}
		if head := fmt.Sprintf("%q", l.L.head); l.L.n != tt.n || (head != tt.head && !(tt.head == "[]" && l.L.head == nil)) {
			t.Errorf("%s: n=%d head=%s, want %d %s", tt.in, l.L.n, head, tt.n, tt.head)
		}
	}
	var l struct {
		L listHead `json:"l"`
	}
	if err := json.Unmarshal([]byte(`{"l":[1,2,3]}`), &l); err == nil {
		t.Error("a list of numbers decoded as strings")
	}
}

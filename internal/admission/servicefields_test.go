package admission

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// Hostile objects stay bounded: a long list is counted, never built; deep
// nesting and malformed JSON are an error naming the problem, never a
// panic; a duplicate key replaces an earlier one, as the apiserver reads it.
func TestDecodeServiceFieldsBoundsHostileObjects(t *testing.T) {
	tests := []struct {
		name    string
		raw     string
		wantErr string // empty: decodes
		check   func(t *testing.T, f serviceFields)
	}{
		{name: "fifty thousand clusterIPs are counted, two kept",
			raw: `{"spec":{"clusterIPs":[` + strings.Repeat(`"10.96.200.5",`, 49999) + `"10.96.200.5"]}}`,
			check: func(t *testing.T, f serviceFields) {
				if f.Spec.ClusterIPs.n != 50000 || len(f.Spec.ClusterIPs.head) != 2 || f.complete() {
					t.Errorf("clusterIPs n %d head %v complete %v; want 50000, 2 kept, incomplete", f.Spec.ClusterIPs.n, f.Spec.ClusterIPs.head, f.complete())
				}
			}},
		{name: "a later duplicate replaces an earlier one",
			raw: `{"spec":{"clusterIP":"1.1.1.1","clusterIP":"2.2.2.2","clusterIPs":["1.1.1.1"],"clusterIPs":null}}`,
			check: func(t *testing.T, f serviceFields) {
				if f.Spec.ClusterIP != "2.2.2.2" || f.Spec.ClusterIPs.n != 0 || f.Spec.ClusterIPs.head != nil {
					t.Errorf("spec %+v", *f.Spec)
				}
			}},
		{name: "keys in another case", raw: `{"METADATA":{"Name":"x"},"Spec":{"ClusterIP":"1.2.3.4"}}`,
			check: func(t *testing.T, f serviceFields) {
				if f.Metadata.Name != "x" || f.Spec.ClusterIP != "1.2.3.4" {
					t.Errorf("fields %+v spec %+v", f.Metadata, f.Spec)
				}
			}},
		{name: "no spec", raw: `{"metadata":{"name":"x"}}`,
			check: func(t *testing.T, f serviceFields) {
				if f.Spec != nil {
					t.Errorf("spec %+v, want none", f.Spec)
				}
			}},
		{name: "nesting as deep as encoding/json allows", raw: `{"x":` + strings.Repeat("[", 9998) + strings.Repeat("]", 9998) + `,"spec":{}}`},
		{name: "nesting deeper than encoding/json allows", raw: `{"x":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `,"spec":{}}`, wantErr: "exceeded max depth"},
		{name: "no object", raw: ``, wantErr: "the admission request carries no object"},
		{name: "a clusterIP that is not a string", raw: `{"spec":{"clusterIP":5}}`, wantErr: "cannot unmarshal number into Go struct field serviceSpecFields.spec.clusterIP of type string"},
		{name: "clusterIPs that are not a list", raw: `{"spec":{"clusterIPs":"10.96.0.1"}}`, wantErr: "cannot unmarshal string into Go struct field serviceSpecFields.spec.clusterIPs of type []string"},
		{name: "trailing bytes", raw: `{"spec":{}} x`, wantErr: "invalid character 'x' after top-level value"},
		{name: "an unclosed list", raw: `{"x":[1,"spec":{}}`, wantErr: "decode the Service in the admission request: invalid character"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := decodeServiceFields([]byte(tt.raw))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.check != nil {
				tt.check(t, f)
			}
		})
	}
}

// BenchmarkDecodeServiceFields decodes the fields a decision reads from a
// recorded Service (1.7 KB, most of it managedFields), beside the whole
// corev1.Service. BENCHMARKS.md ("The Service decoder") has the figures.
func BenchmarkDecodeServiceFields(b *testing.B) {
	data, err := os.ReadFile(filepath.Join("testdata", "admissionreviews", "validate-002-create-wh-auto.json"))
	if err != nil {
		b.Fatal(err)
	}
	var review struct {
		Request struct {
			Object json.RawMessage `json:"object"`
		} `json:"request"`
	}
	if err := json.Unmarshal(data, &review); err != nil {
		b.Fatal(err)
	}
	raw := review.Request.Object
	b.Run("fields", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeServiceFields(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("whole-service", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var svc corev1.Service
			if err := json.Unmarshal(raw, &svc); err != nil {
				b.Fatal(err)
			}
		}
	})
}

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

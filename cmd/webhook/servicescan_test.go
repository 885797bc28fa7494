package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The scan must find exactly what encoding/json finds, or give up.
func TestScanServiceFieldsAgreesWithEncodingJSON(t *testing.T) {
	tests := []struct {
		name   string
		raw    string
		scans  bool // false: the scan gives up and encoding/json decides
		noSpec bool
	}{
		{name: "a dynamic create", raw: `{"metadata":{"name":"web","namespace":"default","labels":{"a":"b"}},"spec":{"ports":[{"port":80}],"type":"ClusterIP","ipFamilyPolicy":"SingleStack"}}`, scans: true},
		{name: "both lists and a static IP", raw: `{"spec":{"clusterIP":"10.96.0.20","clusterIPs":["10.96.0.20","fd00::1"],"ipFamilies":["IPv4","IPv6"]},"metadata":{"name":"a"}}`, scans: true},
		{name: "keys in another case", raw: `{"METADATA":{"Name":"x"},"Spec":{"ClusterIP":"1.2.3.4","CLUSTERIPS":["1.2.3.4"]}}`, scans: true},
		{name: "a later duplicate replaces an earlier one", raw: `{"spec":{"clusterIP":"1.1.1.1","clusterIP":"2.2.2.2","clusterIPs":["1.1.1.1"],"clusterIPs":null}}`, scans: true},
		{name: "two specs merge", raw: `{"spec":{"clusterIP":"1.1.1.1"},"spec":{"type":"NodePort"}}`, scans: true},
		{name: "a null spec after a spec", raw: `{"spec":{"clusterIP":"1.1.1.1"},"spec":null}`, scans: true, noSpec: true},
		{name: "no spec", raw: `{"metadata":{"name":"x"}}`, scans: true, noSpec: true},
		{name: "null strings change nothing", raw: `{"metadata":{"name":"x","name":null},"spec":{"type":null,"clusterIP":null,"ipFamilyPolicy":null}}`, scans: true},
		{name: "escapes in values", raw: `{"metadata":{"name":"a\u0062c\n"},"spec":{"clusterIP":"10.96.0.\u0032"}}`, scans: true},
		{name: "invalid UTF-8 is replaced", raw: "{\"metadata\":{\"name\":\"a\xffb\"},\"spec\":{}}", scans: true},
		{name: "every kind of value skipped", raw: `{"x":[1,-2.5e+3,0,true,false,null,{"a":[[]]},"\"\\\/\b\f\n\r\t\u00e9"],"spec":{"y":{}}}`, scans: true},
		{name: "null entries in the lists, an empty list", raw: `{"spec":{"clusterIPs":[null,"10.96.0.1",5],"ipFamilies":[]}}`, scans: true},
		{name: "a number among the first entries", raw: `{"spec":{"clusterIPs":["10.96.0.1",5]}}`},
		{name: "fifty thousand clusterIPs", raw: `{"spec":{"clusterIPs":[` + strings.Repeat(`"10.96.200.5",`, 49999) + `"10.96.200.5"]}}`, scans: true},
		{name: "nesting deeper than encoding/json allows", raw: `{"x":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `,"spec":{}}`},
		{name: "nesting as deep as encoding/json allows", raw: `{"x":` + strings.Repeat("[", 9998) + strings.Repeat("]", 9998) + `,"spec":{}}`, scans: true},
		{name: "an escaped key", raw: `{"sp\u0065c":{"clusterIP":"1.1.1.1"}}`},
		{name: "an escaped key in a skipped object", raw: `{"metadata":{"managedFields":[{"k:{\"port\":80}":{}}]},"spec":{"clusterIP":"1.1.1.1"}}`, scans: true},
		{name: "an escaped non-ASCII key (the Kelvin sign folds to k)", raw: `{"spec":{"typ\u212a":1}}`},
		{name: "a non-ASCII key spelled raw", raw: "{\"spec\":{\"typ\u212a\":1}}"},
		{name: "a spec that is not an object", raw: `{"spec":5}`},
		{name: "a clusterIP that is not a string", raw: `{"spec":{"clusterIP":5}}`},
		{name: "clusterIPs that are not a list", raw: `{"spec":{"clusterIPs":"10.96.0.1"}}`},
		{name: "clusterIPs of numbers", raw: `{"spec":{"clusterIPs":[1]}}`},
		{name: "metadata that is a list", raw: `{"metadata":[]}`},
		{name: "not an object", raw: `[]`},
		{name: "trailing bytes", raw: `{"spec":{}} x`},
		{name: "a trailing comma", raw: `{"spec":{},}`},
		{name: "a number with a leading zero", raw: `{"x":01,"spec":{}}`},
		{name: "a bad escape in a skipped value", raw: `{"x":"\q","spec":{}}`},
		{name: "an unclosed list", raw: `{"x":[1,"spec":{}}`},
		{name: "a control character in a string", raw: "{\"x\":\"a\x01\",\"spec\":{}}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := scanServiceFields([]byte(tt.raw))
			if ok != tt.scans {
				t.Fatalf("scan ok %v, want %v", ok, tt.scans)
			}
			if ok {
				assertAgrees(t, []byte(tt.raw), got)
				if (got.Spec == nil) != tt.noSpec {
					t.Errorf("spec %+v, want nil %v", got.Spec, tt.noSpec)
				}
			}
		})
	}
}

func TestScanServiceFieldsReadsTheRecordedReviews(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("testdata", "admissionreviews", "*.json"))
	if len(files) == 0 {
		t.Fatal("no recorded reviews")
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var review struct {
			Request struct {
				Object json.RawMessage `json:"object"`
			} `json:"request"`
		}
		if err := json.Unmarshal(data, &review); err != nil {
			t.Fatal(err)
		}
		got, ok := scanServiceFields(review.Request.Object)
		if !ok {
			t.Fatalf("%s: the scan gave up on a recorded Service", file)
		}
		if got.Metadata.Name == "" || got.Spec == nil {
			t.Fatalf("%s: scanned %+v", file, got)
		}
		assertAgrees(t, review.Request.Object, got)
	}
}

// assertAgrees fails unless encoding/json decodes raw into got.
func assertAgrees(t *testing.T, raw []byte, got serviceFields) {
	t.Helper()
	var want serviceFields
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatalf("the scan accepted what encoding/json refuses (%v): %.200q", err, raw)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("scan %+v (spec %+v)\nencoding/json %+v (spec %+v)\nfor %.200q", got, got.Spec, want, want.Spec, raw)
	}
}

func FuzzScanServiceFields(f *testing.F) {
	f.Add([]byte(`{"metadata":{"name":"web","namespace":"default"},"spec":{"type":"ClusterIP","clusterIP":"10.96.0.20","clusterIPs":["10.96.0.20"],"ipFamilies":["IPv4"],"ipFamilyPolicy":"SingleStack","ports":[{"port":80}]}}`))
	f.Add([]byte(`{"spec":{"clusterIP":"1.1.1.1"},"spec":null,"x":[1,-2.5e+3,true,"\u00e9"]}`))
	f.Add([]byte(`{"spec":{"clusterIPs":[null,"10.96.0.1",5],"ipFamilies":[],"ipFamilyPolicy":"Require\u0044ualStack"}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, ok := scanServiceFields(raw)
		if !ok {
			return
		}
		assertAgrees(t, raw, got)
	})
}

// BenchmarkDecodeServiceFields is the scan of a recorded Service (1.7 KB,
// most of it managedFields) beside encoding/json's decoding of the same
// fields and of the whole corev1.Service.
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
	b.Run("scan", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := scanServiceFields(raw); !ok {
				b.Fatal("gave up")
			}
		}
	})
	b.Run("encoding-json-fields", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var f serviceFields
			if err := json.Unmarshal(raw, &f); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json-service", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var svc corev1.Service
			if err := json.Unmarshal(raw, &svc); err != nil {
				b.Fatal(err)
			}
		}
	})
}

package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	sigsyaml "sigs.k8s.io/yaml"

	"clusterip-policy/internal/exitcode"
	"clusterip-policy/test/fixtures"
)

// runCLI runs the command line args through the command tree main runs
// (NewRoot, Run), without serve.
func runCLI(stdin string, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := Run(NewRoot(Name, IOStreams{In: strings.NewReader(stdin), Out: &out, ErrOut: &errb}, nil), args)
	return code, out.String(), errb.String()
}

func TestReviewOfTheShippedExamples(t *testing.T) {
	code, out, stderr := runCLI("", "review", "--policy", "../../examples/clusterippolicy.yaml", "-o", "json", "../../examples/services/")
	if code != exitcode.Denied {
		t.Fatalf("exit %d, want 1 (the examples include denied Services); stderr %s", code, stderr)
	}
	want := map[string]struct {
		decision string
		ips      string
		rules    string
	}{
		"kube-system/kube-dns":        {"allowed", "10.96.0.10", ""},
		"default/my-service":          {"allowed", "", ""},
		"default/ingress-vip":         {"allowed", "10.96.0.20", ""},
		"default/early-bird":          {"denied", "", "reserved-for-other"},
		"default/legacy-db":           {"denied", "", "static-ip-in-dynamic-band"},
		"default/copied-from-staging": {"denied", "", "outside-service-cidrs"},
		"default/db-peers":            {"allowed", "None", ""},
	}
	// One document per run, on one line; its keys are public API.
	if strings.Count(out, "\n") != 1 {
		t.Fatalf("-o json printed %d lines, want one document on one line:\n%s", strings.Count(out, "\n"), out)
	}
	var doc reviewDocument
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(doc.Services) != len(want) || doc.Allowed != 4 || doc.Denied != 3 {
		t.Fatalf("%d services, %d allowed, %d denied; want %d, 4, 3:\n%s", len(doc.Services), doc.Allowed, doc.Denied, len(want), out)
	}
	for _, r := range doc.Services {
		w, ok := want[r.Namespace+"/"+r.Name]
		if !ok {
			t.Fatalf("unexpected Service %s/%s", r.Namespace, r.Name)
		}
		var rules []string
		for _, id := range r.Rules {
			rules = append(rules, string(id))
		}
		if string(r.Decision) != w.decision || strings.Join(r.ClusterIPs, ",") != w.ips || strings.Join(rules, ",") != w.rules || r.Allowed != (w.decision != "denied") {
			t.Errorf("%s/%s: got %s %v %v, want %+v", r.Namespace, r.Name, r.Decision, r.ClusterIPs, r.Rules, w)
		}
	}
}

func TestReviewJSONKeysArePublicAPI(t *testing.T) {
	_, out, _ := runCLI("apiVersion: v1\nkind: Service\nmetadata: {name: kube-dns, namespace: kube-system}\nspec: {ports: [{port: 53}]}\n",
		"review", "--policy", "../../examples/clusterippolicy.yaml", "-o", "json", "-")
	want := `{"services":[{"namespace":"kube-system","name":"kube-dns","allowed":true,"decision":"patched","rules":[],"mutations":["assign-reserved"],"clusterIPs":["10.96.0.10"],"message":"assigned reserved 10.96.0.10","patch":[{"op":"add","path":"/spec/clusterIP","value":"10.96.0.10"},{"op":"add","path":"/spec/clusterIPs","value":["10.96.0.10"]}]}],"allowed":1,"denied":0}`
	if strings.TrimSpace(out) != want {
		t.Fatalf("got  %s\nwant %s", out, want)
	}
}

func TestReviewSeesEarlierServicesOfTheInput(t *testing.T) {
	in := `apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Service
  metadata: {name: a}
  spec: {clusterIP: 10.96.0.30, ports: [{port: 80}]}
- apiVersion: v1
  kind: Service
  metadata: {name: b}
  spec: {clusterIP: 10.96.0.30, ports: [{port: 80}]}
`
	code, out, _ := runCLI(in, "review", "--service-cidr", "10.96.0.0/16", "-o", "json", "-")
	if code != exitcode.Denied || !strings.Contains(out, `is held by IPAddress 10.96.0.30 for Service default/a`) {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

func TestReviewAllocatedFlag(t *testing.T) {
	svc := "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {clusterIP: 10.96.0.30, ports: [{port: 80}]}\n"
	code, out, _ := runCLI(svc, "review", "--service-cidr", "10.96.0.0/16", "--allocated", "10.96.0.30=prod/db", "-")
	if code != exitcode.Denied || !strings.Contains(out, "is held by IPAddress 10.96.0.30 for Service prod/db") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

func TestReviewInputErrorsNameTheFileAndTheProblem(t *testing.T) {
	dir := t.TempDir()
	typo := filepath.Join(dir, "typo.yaml")
	if err := os.WriteFile(typo, []byte("apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {clusterIp: 10.96.0.30}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(dir, "broken.yaml")
	if err := os.WriteFile(broken, []byte("apiVersion: v1\nkind: Service\nmetadata: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	badPolicy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(badPolicy, []byte(fixtures.Policy("reservations:\n- ip: 10.96.0.300\n  service: kube-system/kube-dns\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{name: "a missing file", args: []string{"review", "--service-cidr", "10.96.0.0/16", filepath.Join(dir, "nope.yaml")}, want: "nope.yaml: no such file or directory"},
		{name: "an unknown Service field", args: []string{"review", "--service-cidr", "10.96.0.0/16", typo}, want: `typo.yaml: document 1: Service "web": unknown field "spec.clusterIp"`},
		{name: "malformed YAML", args: []string{"review", "--service-cidr", "10.96.0.0/16", broken}, want: "broken.yaml: document 1:"},
		{name: "a bad policy", args: []string{"review", "--policy", badPolicy, "--service-cidr", "10.96.0.0/16", typo}, want: `spec.reservations[0].ip (line 7): "10.96.0.300" is not an IP address`},
		{name: "no ranges", args: []string{"review", typo}, want: "no Service CIDRs to review against"},
		{name: "a bad --service-cidr", args: []string{"review", "--service-cidr", "10.96.0.1/16", typo}, want: "did you mean 10.96.0.0/16?"},
		{name: "a bad --allocated", args: []string{"review", "--service-cidr", "10.96.0.0/16", "--allocated", "10.96.0.30", typo}, want: "write IP=NAMESPACE/NAME"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCLI("", tt.args...)
			if code != exitcode.BadData || !strings.Contains(stderr, tt.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, stderr, tt.want)
			}
		})
	}
}

func TestBandsReproducesTheFactsTable(t *testing.T) {
	code, out, _ := runCLI("", "bands", "-o", "json", "10.96.0.0/12", "10.96.0.0/27", "10.96.0.0/28", "10.96.0.0/31", "fd00::/64", "fd00::/120")
	if code != exitcode.OK {
		t.Fatalf("exit %d", code)
	}
	want := `{"ranges":[` +
		`{"cidr":"10.96.0.0/12","usable":"10.96.0.1-10.111.255.254","static":"10.96.0.1-10.96.1.0","dynamic":"10.96.1.1-10.111.255.254","offset":256},` +
		`{"cidr":"10.96.0.0/27","usable":"10.96.0.1-10.96.0.30","static":"10.96.0.1-10.96.0.16","dynamic":"10.96.0.17-10.96.0.30","offset":16},` +
		`{"cidr":"10.96.0.0/28","usable":"10.96.0.1-10.96.0.14","static":"none","dynamic":"10.96.0.1-10.96.0.14","offset":0},` +
		`{"cidr":"10.96.0.0/31","usable":"none","static":"none","dynamic":"none","offset":0},` +
		`{"cidr":"fd00::/64","usable":"fd00::1-fd00::ffff:ffff:ffff:ffff","static":"fd00::1-fd00::100","dynamic":"fd00::101-fd00::ffff:ffff:ffff:ffff","offset":256},` +
		`{"cidr":"fd00::/120","usable":"fd00::1-fd00::ff","static":"fd00::1-fd00::10","dynamic":"fd00::11-fd00::ff","offset":16}]}
`
	if out != want {
		t.Fatalf("got\n%s\nwant\n%s", out, want)
	}
	if code, _, stderr := runCLI("", "bands", "10.96.0.5/16"); code != exitcode.BadData || !strings.Contains(stderr, "did you mean 10.96.0.0/16?") {
		t.Fatalf("bad CIDR: exit %d %s", code, stderr)
	}
}

// The example policy object reviews exactly as the same policy in the
// retired file format.
func TestReviewOfThePolicyObjectExample(t *testing.T) {
	code, fromFile, _ := runCLI("", "review", "--policy", "testdata/retired-policy.yaml", "-o", "json", "../../examples/services/")
	code2, fromObject, stderr := runCLI("", "review", "--policy", "../../examples/clusterippolicy.yaml", "-o", "json", "../../examples/services/")
	if code2 != code || fromObject != fromFile {
		t.Fatalf("the object (exit %d, stderr %s):\n%s\nthe file (exit %d):\n%s", code2, stderr, fromObject, code, fromFile)
	}
}

// The old file apiVersion keeps working in review, with a note on stderr
// that names the object's apiVersion and how to convert; the object gets
// no note, and stdout (the public review output) is the same for both.
func TestReviewNotesTheOldFileFormat(t *testing.T) {
	code, fromFile, stderr := runCLI("", "review", "--policy", "testdata/retired-policy.yaml", "-o", "json", "../../examples/services/")
	if code != exitcode.Denied {
		t.Fatalf("exit %d with the policy file, want 1 (some example Services are denied); stderr %s", code, stderr)
	}
	for _, part := range []string{
		`review: note: "testdata/retired-policy.yaml" is a policy file (apiVersion clusterip-policy/v1alpha1), read as before`,
		"ClusterIPPolicy object (apiVersion clusterip-policy.io/v1alpha1, named default)",
		"To convert: drop apiVersion and kind, indent the rest under spec:",
		`docs/policy.md, "The retired file format"`,
	} {
		if !strings.Contains(stderr, part) {
			t.Errorf("stderr lacks %q:\n%s", part, stderr)
		}
	}
	if n := strings.Count(stderr, "\n"); n != 1 {
		t.Errorf("the note takes %d lines, want 1:\n%s", n, stderr)
	}
	code2, fromObject, stderr2 := runCLI("", "review", "--policy", "../../examples/clusterippolicy.yaml", "-o", "json", "../../examples/services/")
	if code2 != code || fromObject != fromFile {
		t.Errorf("the object reviews differently (exit %d):\n%s\nthe file (exit %d):\n%s", code2, fromObject, code, fromFile)
	}
	if stderr2 != "" {
		t.Errorf("the object manifest got a note: %s", stderr2)
	}
	// A file that does not load gets its error, not the note.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("apiVersion: clusterip-policy/v1alpha1\nkind: ClusterIPPolicy\nreservations: [{ip: 10.96.0.300, service: a/b}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runCLI("", "review", "--policy", bad, "../../examples/services/")
	if code != exitcode.BadData || strings.Contains(stderr, "note:") || !strings.Contains(stderr, "10.96.0.300") {
		t.Errorf("a bad policy file: exit %d, stderr %s; want exit 2 with the error and no note", code, stderr)
	}
	// The note stays one bounded line whatever the path.
	long := filepath.Join(t.TempDir(), strings.Repeat("p", 200)+".yaml")
	data, err := os.ReadFile("testdata/retired-policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(long, data, 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, stderr = runCLI("", "review", "--policy", long, "../../examples/services/")
	if !strings.Contains(stderr, "more bytes") || len(stderr) > 1024 {
		t.Errorf("a long path: note of %d bytes, want it clipped:\n%s", len(stderr), stderr)
	}
}

// audit takes --policy as review does, and notes the old file format the
// same way, before it reads the cluster.
func TestAuditNotesTheOldFileFormat(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-kubeconfig")
	code, _, stderr := runCLI("", "audit", "--policy", "testdata/retired-policy.yaml", "--kubeconfig", missing)
	if code != exitcode.BadData || !strings.Contains(stderr, `audit: note: "testdata/retired-policy.yaml" is a policy file (apiVersion clusterip-policy/v1alpha1)`) || !strings.Contains(stderr, "no-kubeconfig") {
		t.Errorf("exit %d, stderr:\n%s\nwant exit 2 for the kubeconfig, after the note", code, stderr)
	}
	_, _, stderr = runCLI("", "audit", "--policy", "../../examples/clusterippolicy.yaml", "--kubeconfig", missing)
	if strings.Contains(stderr, "note:") {
		t.Errorf("the object manifest got a note: %s", stderr)
	}
}

// -o yaml prints the same document as -o json, in YAML, for every command
// that takes -o; an unknown format is refused naming the three.
func TestEveryCommandPrintsOneJSONOrYAMLDocument(t *testing.T) {
	for _, args := range [][]string{
		{"review", "--policy", "../../examples/clusterippolicy.yaml", "../../examples/services/"},
		{"bands", "10.96.0.0/16", "fd00::/108"},
		{"version"},
	} {
		_, asJSON, _ := runCLI("", append(args, "-o", "json")...)
		_, asYAML, stderr := runCLI("", append(args, "-o", "yaml")...)
		var fromJSON, fromYAML any
		if err := json.Unmarshal([]byte(asJSON), &fromJSON); err != nil {
			t.Fatalf("%s -o json is not one JSON document: %v\n%s", args[0], err, asJSON)
		}
		if err := sigsyaml.Unmarshal([]byte(asYAML), &fromYAML); err != nil {
			t.Fatalf("%s -o yaml is not one YAML document: %v\n%s%s", args[0], err, asYAML, stderr)
		}
		if !reflect.DeepEqual(fromJSON, fromYAML) {
			t.Errorf("%s: -o yaml differs from -o json:\n%s\n%s", args[0], asYAML, asJSON)
		}
		code, _, stderr := runCLI("", append(args, "-o", "toml")...)
		if code != exitcode.BadData || !strings.Contains(stderr, `-o "toml": use text, json or yaml`) {
			t.Errorf("%s -o toml: exit %d, stderr %q; want 2 naming the formats", args[0], code, stderr)
		}
	}
	_, out, _ := runCLI("", "version", "-o", "json")
	var v versionDocument
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil || v.Version == "" || v.Commit == "" || !strings.HasPrefix(v.Go, "go") || !strings.Contains(v.Platform, "/") {
		t.Errorf("version -o json: %+v, %v", v, err)
	}
	if code, _, stderr := runCLI("", "version", "extra"); code != exitcode.BadData || !strings.Contains(stderr, `unexpected argument "extra"`) {
		t.Errorf("version extra: exit %d, %q", code, stderr)
	}
}

// The reserved-ranges example: the Namespace objects among the inputs give
// the namespaceSelector its labels, so payments-canary may use the payments
// block; without them it is matched by name only and denied.
func TestReviewOfTheReservedRangesExample(t *testing.T) {
	const dir = "../../examples/reserved-ranges/"
	decisions := func(out string) string {
		var doc reviewDocument
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		var got []string
		for _, r := range doc.Services {
			rules := "-"
			if len(r.Rules) > 0 {
				rules = string(r.Rules[0])
			}
			got = append(got, fmt.Sprintf("%s/%s %s %s", r.Namespace, r.Name, r.Decision, rules))
		}
		return strings.Join(got, "\n")
	}
	code, out, stderr := runCLI("", "review", "--policy", dir+"clusterippolicy.yaml", "-o", "json", dir+"namespaces.yaml", dir+"services.yaml")
	want := `kube-system/kube-dns allowed -
kube-system/metrics allowed -
payments-canary/api allowed -
search/frontend allowed -
search/api denied reserved-range-for-other
search/indexer denied reserved-range-for-other
kube-system/coredns-test denied reserved-for-other`
	if got := decisions(out); code != exitcode.Denied || got != want || stderr != "" {
		t.Fatalf("exit %d, stderr %q\n got:\n%s\nwant:\n%s", code, stderr, got, want)
	}
	_, out, _ = runCLI("", "review", "--policy", dir+"clusterippolicy.yaml", "-o", "json", dir+"services.yaml")
	if got := decisions(out); !strings.Contains(got, "payments-canary/api denied reserved-range-for-other") {
		t.Fatalf("without its Namespace, payments-canary has no team label:\n%s", got)
	}
}

// bands --policy shows each reserved range against the CIDRs given: the
// CIDR that holds it, the band(s) it covers, who may use it.
func TestBandsShowsTheReservedRanges(t *testing.T) {
	code, out, stderr := runCLI("", "bands", "--policy", "../../examples/reserved-ranges/clusterippolicy.yaml", "-o", "json", "10.96.0.0/24", "10.96.128.0/25")
	if code != exitcode.OK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var doc struct {
		ReservedRanges []reservedRangeRow `json:"reservedRanges"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var got []string
	for _, r := range doc.ReservedRanges {
		got = append(got, r.Range+" "+r.CIDR+" "+r.Band+" "+r.Who)
	}
	want := "10.96.0.8/29 10.96.0.0/24 static namespace kube-system|" +
		"10.96.0.64/26 10.96.0.0/24 dynamic namespaces matching team=payments|" +
		"10.96.128.0-10.96.128.99 10.96.128.0/25 static and dynamic namespace search (Services matching tier=frontend)"
	if strings.Join(got, "|") != want {
		t.Fatalf("got  %s\nwant %s", strings.Join(got, "|"), want)
	}
	if code, out, _ := runCLI("", "bands", "-o", "json", "10.96.0.0/24"); code != exitcode.OK || strings.Contains(out, "reservedRanges") {
		t.Fatalf("without --policy the document is as before: %s", out)
	}
	if code, _, stderr := runCLI("", "bands", "--policy", "/nonexistent.yaml", "10.96.0.0/24"); code != exitcode.BadData || !strings.Contains(stderr, "/nonexistent.yaml") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
}

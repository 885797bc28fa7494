package policy

import (
	"fmt"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"clusterip-policy/pkg/allocview"
	"clusterip-policy/test/fixtures"
)

func TestShapeIsCheckedBeforeAnyPerIPWork(t *testing.T) {
	p := fixtures.MustPolicy(t, ParseDocument, dnsPolicy)
	many := make([]string, 50000)
	for i := range many {
		many[i] = "10.96.200.5"
	}
	tests := []struct {
		name    string
		stage   Stage
		op      Operation
		svc     *corev1.Service
		old     *corev1.Service
		message string // "" for allowed
	}{
		{name: "50,000 clusterIPs", svc: fixtures.Service("default", "web", fixtures.WithClusterIPs(many...)),
			message: "spec.clusterIPs: Too many: 50000: must have at most 2 items (one per IP family); ask for at most one IPv4 and one IPv6 address, or leave clusterIPs empty to get them allocated"},
		{name: "three clusterIPs at the validating stage", stage: StageValidate, svc: fixtures.Service("default", "web", fixtures.WithClusterIPs("10.96.0.20", "fd00:10:96::20", "10.96.0.21")),
			message: "spec.clusterIPs: Too many: 3: must have at most 2 items (one per IP family); ask for at most one IPv4 and one IPv6 address, or leave clusterIPs empty to get them allocated"},
		{name: "three ipFamilies", svc: fixtures.Service("kube-system", "kube-dns", fixtures.WithIPFamilies("IPv4", "IPv6", "IPv4")),
			message: "spec.ipFamilies: Too many: 3: must have at most 2 items (IPv4, IPv6 in the order wanted)"},
		{name: "an unknown family", svc: fixtures.Service("kube-system", "kube-dns", fixtures.WithIPFamilies("IPv5")),
			message: `spec.ipFamilies[0]: Unsupported value: "IPv5": supported values: "IPv4", "IPv6"`},
		{name: "a family twice", svc: fixtures.Service("kube-system", "kube-dns", fixtures.WithIPFamilies("IPv6", "IPv6")),
			message: `spec.ipFamilies[1]: Duplicate value: "IPv6": a Service has one IP per family`},
		{name: "None second", svc: fixtures.Service("default", "web", fixtures.WithClusterIPs("10.96.0.20", "None")),
			message: `spec.clusterIPs: Invalid value: ["10.96.0.20","None"]: 'None' must be the first and only value`},
		{name: "an empty entry", svc: fixtures.Service("default", "web", fixtures.WithClusterIPs("10.96.0.20", "")),
			message: `spec.clusterIPs[1]: Invalid value: "": must be a valid IP address, or leave clusterIPs empty to get one allocated`},
		{name: "two IPv4 addresses", svc: fixtures.Service("default", "web", fixtures.WithClusterIPs("10.96.0.20", "10.96.0.20")),
			message: `spec.clusterIPs: Invalid value: ["10.96.0.20","10.96.0.20"]: may specify no more than one IP for each IP family`},
		{name: "an IPv6 address where ipFamilies says IPv4", svc: fixtures.Service("default", "web", fixtures.WithClusterIPs("10.96.0.20", "fd00:10:96::20"), fixtures.WithIPFamilies("IPv4", "IPv4")),
			message: `spec.ipFamilies[1]: Duplicate value: "IPv4": a Service has one IP per family`},
		{name: "families in the wrong order", svc: fixtures.Service("default", "web", fixtures.WithClusterIPs("10.96.0.20", "fd00:10:96::20"), fixtures.WithIPFamilies("IPv6", "IPv4")),
			message: "spec.clusterIPs[0]: Invalid value: \"10.96.0.20\": expected an IPv6 value as indicated by `ipFamilies[0]`"},
		{name: "clusterIP and clusterIPs[0] disagree on CREATE", svc: fixtures.Service("default", "web", fixtures.WithClusterIPs("10.96.0.20"), fixtures.WithClusterIP("10.96.0.21")),
			message: `spec.clusterIPs: Invalid value: ["10.96.0.20"]: first value must match clusterIP "10.96.0.21"; set both to the same address, or clusterIP alone`},
		{name: "a long clusterIP is clipped in the mismatch message", svc: fixtures.Service("default", "web", fixtures.WithClusterIPs("10.96.0.20"), fixtures.WithClusterIP(strings.Repeat("9", 1000))),
			message: `spec.clusterIPs: Invalid value: ["10.96.0.20"]: first value must match clusterIP "` + strings.Repeat("9", 128) + `... (872 more bytes)"; set both to the same address, or clusterIP alone`},
		{name: "a mutating UPDATE may still carry a changed clusterIP: the apiserver reconciles it",
			op: Update, svc: fixtures.Service("default", "web", fixtures.WithClusterIPs("10.96.0.20"), fixtures.WithClusterIP("")), old: fixtures.Service("default", "web", fixtures.WithClusterIPs("10.96.0.20"))},
		{name: "a dual-stack pair in family order", svc: fixtures.Service("default", "web", fixtures.WithClusterIPs("fd00:10:96::20", "10.96.0.20"), fixtures.WithIPFamilies("IPv6", "IPv4"))},
		{name: "an ExternalName Service with 50,000 clusterIPs too", svc: fixtures.Service("default", "web", fixtures.WithType(corev1.ServiceTypeExternalName), fixtures.WithClusterIPs(many...)),
			message: "spec.clusterIPs: Too many: 50000: must have at most 2 items (one per IP family); ask for at most one IPv4 and one IPv6 address, or leave clusterIPs empty to get them allocated"},
		{name: "an ExternalName Service's two IPs are left to the apiserver (it drops them on a change to ExternalName)",
			op: Update, svc: fixtures.Service("default", "web", fixtures.WithType(corev1.ServiceTypeExternalName), fixtures.WithClusterIPs("10.96.0.20", "10.96.0.21")), old: fixtures.Service("default", "web", fixtures.WithClusterIPs("10.96.0.20", "10.96.0.21"))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			op := tt.op
			if op == "" {
				op = Create
			}
			stage := tt.stage
			if stage == "" {
				stage = StageMutate
			}
			env := Env{Policy: p, Snapshot: makeSnapshot(dualStack)}
			req := Request{Operation: op, Service: tt.svc, OldService: tt.old}
			d := Mutate(env, req)
			if stage == StageValidate {
				d = Validate(env, req)
			}
			if tt.message == "" {
				if !d.Allowed() || (len(d.Violations) > 0 && d.Violations[0].Rule == RuleInvalidIP) {
					t.Fatalf("want no shape denial, got %s: %s", d.Outcome, d.Message)
				}
				return
			}
			assertRule(t, d, RuleInvalidIP, tt.message)
			if len(d.Violations) != 1 || len(d.Patch) != 0 || len(d.RequestedIPs) > MaxClusterIPs+1 {
				t.Fatalf("want one violation, no patch and a short IP list; got %d, %v, %d IPs", len(d.Violations), d.Patch, len(d.RequestedIPs))
			}
		})
	}
}

func TestShapeDenialsIgnoreWarnAndAudit(t *testing.T) {
	p := fixtures.MustPolicy(t, ParseDocument, dnsPolicy+"enforcement: {default: audit, rules: {invalid-ip: warn}}\n")
	d := Mutate(Env{Policy: p, Snapshot: makeSnapshot(v4Only)}, Request{Operation: Create, Service: fixtures.Service("default", "web", fixtures.WithClusterIPs("10.96.0.20", "10.96.0.21", "10.96.0.22"))})
	if d.Allowed() || d.Violations[0].Action != ActionDeny {
		t.Fatalf("want a denial, got %s: %+v", d.Outcome, d.Violations)
	}
}

func TestClip(t *testing.T) {
	tests := []struct{ in, want string }{
		{"short", "short"},
		{strings.Repeat("a", 10+clipSlack), strings.Repeat("a", 10+clipSlack)},
		{strings.Repeat("a", 100), strings.Repeat("a", 10) + "... (90 more bytes)"},
		{strings.Repeat("é", 50), strings.Repeat("é", 5) + "... (90 more bytes)"},
		{"ab" + strings.Repeat("é", 50), "ab" + strings.Repeat("é", 4) + "... (92 more bytes)"},
	}
	for _, tt := range tests {
		if got := Clip(tt.in, 10); got != tt.want {
			t.Errorf("Clip(%.20q...) = %q, want %q", tt.in, got, tt.want)
		}
		if again := Clip(Clip(tt.in, 10), 10); again != tt.want {
			t.Errorf("clipping twice changed %q to %q", tt.want, again)
		}
	}
	if got := fmt.Sprint(ClipList([]string{"a", "b", "c"}, 2)); got != "[a b ... (1 more)]" {
		t.Errorf("ClipList = %s", got)
	}
}

// Messages that list ranges or bands name a few and count the rest,
// however many ServiceCIDRs the cluster has.
func TestMessagesListAFewRangesWhateverTheirNumber(t *testing.T) {
	var cidrs []allocview.ServiceCIDR
	for i := range 1000 {
		cidrs = append(cidrs, serviceCIDR(fmt.Sprintf("extra-%d", i), true, fmt.Sprintf("10.%d.%d.0/24", 100+i/256, i%256)))
	}
	env := Env{Policy: fixtures.MustPolicy(t, ParseDocument, dnsPolicy), Snapshot: makeSnapshot(cidrs)}
	for _, ip := range []string{"192.168.0.1", "10.100.0.200"} {
		d := Mutate(env, Request{Operation: Create, Service: fixtures.Service("default", "web", fixtures.WithClusterIP(ip))})
		if d.Allowed() || len(d.Message) > 600 || !strings.Contains(d.Message, "and 996 more") {
			t.Fatalf("%s: %d bytes: %s", ip, len(d.Message), d.Message)
		}
	}
}

func TestPolicyFileLimits(t *testing.T) {
	many := func(key, item string, n int) string {
		var b strings.Builder
		b.WriteString(key + ":\n")
		for i := range n {
			fmt.Fprintf(&b, item, i/256, i%256)
		}
		return b.String()
	}
	tests := []struct{ name, body, want string }{
		{"65 serviceCIDRs", many("serviceCIDRs", "- 10.%d.%d.0/24\n", 65),
			"spec.serviceCIDRs (line 6): 65 entries, more than the limit of 64; list what the cluster needs (a CIDR covers many addresses, a group many users)"},
		{"10,001 reservations", many("reservations", "- {ip: 10.96.%d.%d, service: default/s}\n", 10001),
			"spec.reservations (line 6): 10001 entries, more than the limit of 10000; list what the cluster needs (a CIDR covers many addresses, a group many users)"},
		{"1,001 exempt groups", "exemptions:\n  " + strings.ReplaceAll(many("groups", "- g%d-%d\n", 1001), "\n", "\n  "),
			"spec.exemptions.groups (line 7): 1001 entries, more than the limit of 1000; list what the cluster needs (a CIDR covers many addresses, a group many users)"},
		{"a file over 1 MiB", "# " + strings.Repeat("x", MaxPolicyBytes) + "\n",
			"the file is 1048676 bytes, more than the limit of 1048576 (1 MiB, a ConfigMap's limit); keep reservations and exemptions to what the cluster needs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseDocument([]byte(fixtures.Policy(tt.body)))
			if err == nil || err.Error() != tt.want {
				t.Fatalf("err = %v\nwant  %s", err, tt.want)
			}
		})
	}
}

func TestLoadFileReadsNoMoreThanTheLimit(t *testing.T) {
	path := t.TempDir() + "/policy.yaml"
	if err := os.WriteFile(path, []byte("# "+strings.Repeat("x", 4*MaxPolicyBytes)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadFile(path)
	if want := "read policy: " + path + ": the file is larger than the limit of 1048576 bytes (1 MiB, a ConfigMap's limit); keep reservations and exemptions to what the cluster needs"; err == nil || err.Error() != want {
		t.Fatalf("err = %v", err)
	}
}

func TestTooManyGivesTheSameDenialFromCountsAlone(t *testing.T) {
	many := make([]string, 50000)
	for i := range many {
		many[i] = "10.96.200.5"
	}
	full := Mutate(Env{Policy: fixtures.MustPolicy(t, ParseDocument, dnsPolicy), Snapshot: makeSnapshot(v4Only)}, Request{Operation: Create, Service: fixtures.Service("default", "web", fixtures.WithClusterIPs(many...))})
	counted, ok := TooMany(StageMutate, 50000, 0, many[:2])
	if !ok || counted.Message != full.Message || counted.Allowed() || fmt.Sprint(counted.Rules()) != "[invalid-ip]" {
		t.Fatalf("counted %v %+v\nfull %+v", ok, counted, full)
	}
	if got := fmt.Sprintf("%q", counted.RequestedIPs); got != `["10.96.200.5" "10.96.200.5" "... (49998 more)"]` {
		t.Fatalf("requested IPs %s", got)
	}
	if many[2] != "10.96.200.5" {
		t.Fatalf("TooMany wrote into the list it was given: %q", many[:3])
	}
	if _, ok := TooMany(StageMutate, 2, 2, many[:2]); ok {
		t.Fatal("two IPs and two families are not too many")
	}
}

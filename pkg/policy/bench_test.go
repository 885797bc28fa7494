package policy

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	sigsyaml "sigs.k8s.io/yaml"

	"clusterip-policy/pkg/allocview"
	"clusterip-policy/test/fixtures"
)

// benchEnv is a /12 cluster with 100,000 allocated IPs and the DNS policy.
func benchEnv(b *testing.B) Env {
	b.Helper()
	v := allocview.NewView()
	snap := v.Update(func(tx *allocview.Tx) {
		tx.SetServiceCIDR(serviceCIDR("kubernetes", true, "10.96.0.0/12", "fd00:10:96::/108"))
		ip := netip.MustParseAddr("10.96.16.0")
		for i := 0; i < 100_000; i++ {
			ip = ip.Next()
			tx.SetAllocation(ip, allocview.ServiceHolder("bench", "svc"))
		}
		tx.MarkSynced(true)
	})
	return Env{Policy: fixtures.MustPolicy(b, ParseDocument, dnsPolicy), Snapshot: snap}
}

func BenchmarkMutateStaticRequest(b *testing.B) {
	env := benchEnv(b)
	req := Request{Operation: Create, Service: fixtures.Service("default", "web", fixtures.WithClusterIP("10.96.0.20"))}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if d := Mutate(env, req); !d.Allowed() {
			b.Fatal(d.Message)
		}
	}
}

func BenchmarkMutateAssignReserved(b *testing.B) {
	env := benchEnv(b)
	req := Request{Operation: Create, Service: fixtures.Service("kube-system", "kube-dns")}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if d := Mutate(env, req); d.Outcome != Patched {
			b.Fatal(d.Message)
		}
	}
}

func BenchmarkMutateDenied(b *testing.B) {
	env := benchEnv(b)
	req := Request{Operation: Create, Service: fixtures.Service("default", "web", fixtures.WithClusterIP("10.100.0.5"))}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if d := Mutate(env, req); d.Allowed() {
			b.Fatal("allowed")
		}
	}
}

func BenchmarkValidateDynamicAllocation(b *testing.B) {
	env := benchEnv(b)
	req := Request{Operation: Create, Service: fixtures.Service("default", "web", fixtures.WithClusterIPs("10.100.7.9"))}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if d := Validate(env, req); !d.Allowed() {
			b.Fatal(d.Message)
		}
	}
}

// An allowed dynamic create, as most reviews are: a Service that asks for
// no IP at the mutating stage, and the address the apiserver picked in the
// dynamic band at the validating stage. Both decide without allocating
// (TestAllowedDynamicCreateDoesNotAllocate).
func dynamicCreate() (mutate, validate Request) {
	return Request{Operation: Create, Service: fixtures.Service("default", "web")},
		Request{Operation: Create, Service: fixtures.Service("default", "web", fixtures.WithClusterIPs("10.100.7.9"))}
}

func BenchmarkMutateDynamicCreate(b *testing.B) {
	env := benchEnv(b)
	req, _ := dynamicCreate()
	b.ReportAllocs()
	for b.Loop() {
		if d := Mutate(env, req); d.Outcome != Allowed {
			b.Fatal(d.Outcome, d.Message)
		}
	}
}

func BenchmarkValidateDynamicCreate(b *testing.B) {
	env := benchEnv(b)
	_, req := dynamicCreate()
	b.ReportAllocs()
	for b.Loop() {
		if d := Validate(env, req); d.Outcome != Allowed {
			b.Fatal(d.Outcome, d.Message)
		}
	}
}

// BenchmarkMutateInReservedRange: a hand-picked address in the last of the
// largest number of reserved ranges (64), by a namespace its selector
// allows; compare BenchmarkMutateStaticRequest.
func BenchmarkMutateInReservedRange(b *testing.B) {
	env := benchEnv(b)
	var body string
	for i := range 64 {
		body += "- {cidr: 10.100." + strconv.Itoa(i) + ".0/26, namespaceSelector: {matchLabels: {team: t" + strconv.Itoa(i) + "}}}\n"
	}
	env.Policy = fixtures.MustPolicy(b, ParseDocument, dnsPolicy+"reservedRanges:\n"+body)
	env.NamespaceLabels = func(string) (map[string]string, bool) { return map[string]string{"team": "t63"}, true }
	req := Request{Operation: Create, Service: fixtures.Service("team", "web", fixtures.WithClusterIP("10.100.63.10"))}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if d := Mutate(env, req); !d.Allowed() {
			b.Fatal(d.Message)
		}
	}
}

// loadBenchSpec is a spec of 1,000 reservations, 16 reserved ranges and
// some exemptions: about what a large cluster's policy holds.
func loadBenchSpec() string {
	var b strings.Builder
	b.WriteString("allowedCIDRs: [10.96.0.0/12]\nreservations:\n")
	for i := range 1000 {
		fmt.Fprintf(&b, "- ip: 10.96.%d.%d\n  service: team-%d/svc-%d\n  note: bench\n", 32+i/200, 1+i%200, i, i)
	}
	b.WriteString("reservedRanges:\n")
	for i := range 16 {
		fmt.Fprintf(&b, "- cidr: 10.96.1.%d/28\n  namespaces: [team-%d]\n", 16*i, i)
	}
	b.WriteString("enforcement:\n  default: warn\n  rules: {already-allocated: audit}\nexemptions:\n  namespaces: [kube-system, monitoring]\n")
	return b.String()
}

// BenchmarkLoadObjectFile loads the object manifest as `review --policy`
// and the webhook's --policy read it.
func BenchmarkLoadObjectFile(b *testing.B) {
	data := []byte(fixtures.Policy(loadBenchSpec()))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseDocument(data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoadObjectSpec loads the spec as the webhook reads it from the
// apiserver (JSON).
func BenchmarkLoadObjectSpec(b *testing.B) {
	spec, err := sigsyaml.YAMLToJSON([]byte(loadBenchSpec()))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseObjectSpec(spec); err != nil {
			b.Fatal(err)
		}
	}
}

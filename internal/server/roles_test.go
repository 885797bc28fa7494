package server

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"clusterip-policy/internal/sharedinformers"
)

// everyRoleArgs turns on every leader role.
var everyRoleArgs = []string{"--policy-source=crd", "--hold-reservations", "--audit-interval=5m", "--manage-match-conditions", "--certificate-source=managed", "--arm-failure-policy", "--backstop"}

func parseServeFlags(t *testing.T, args ...string) *serveOptions {
	t.Helper()
	var o serveOptions
	if err := serveFlags(&o).Parse(args); err != nil {
		t.Fatal(err)
	}
	return &o
}

// testHostContext is the context serve builds, over fake clients, with
// the flags args and metrics registered in reg.
func testHostContext(t *testing.T, reg prometheus.Registerer, args ...string) *hostContext {
	t.Helper()
	client := fake.NewClientset()
	return &hostContext{
		o: parseServeFlags(t, args...), cfg: &rest.Config{Host: "https://127.0.0.1:1"}, client: client,
		dyn: dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()), log: logr.Discard(), registry: reg,
		informers: sharedinformers.New(client, sharedinformers.Configurations{}),
	}
}

// roles are the features that lead: the one table of features (features.go)
// is also the list of the leader's roles, each with its flag and its Work,
// and docs/architecture.md's table of roles lists them; the test fails
// until both say the same, in the same order.
func roles() []feature {
	var r []feature
	for _, f := range features {
		if f.leads != nil {
			r = append(r, f)
		}
	}
	return r
}

func TestTheRolesAreTheDocumentedOnes(t *testing.T) {
	seen := map[string]bool{}
	var names []string
	for _, r := range roles() {
		for _, k := range []string{"name " + r.name, "flag " + r.flag} {
			if k != "flag " && seen[k] {
				t.Errorf("two roles have the %s", k)
			}
			seen[k] = true
		}
		if r.name == "" || r.build == nil {
			t.Errorf("role %q has no name or build", r.name)
		}
		names = append(names, r.name)
	}

	doc, err := os.ReadFile("../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n### The roles\n")
	if !ok {
		t.Fatal(`docs/architecture.md has no section "### The roles"; keep the table of leader roles there for this test`)
	}
	if i := strings.Index(section, "\n#"); i >= 0 {
		section = section[:i]
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z-]+)` \\| ([^|]*) \\|")
	var documented []string
	flags := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		documented = append(documented, m[1])
		flags[m[1]] = m[2]
	}
	if strings.Join(documented, " ") != strings.Join(names, " ") {
		t.Errorf("internal/server's roles are %v; docs/architecture.md's table of roles lists %v: add the role to both, in the same order", names, documented)
	}
	for _, r := range roles() {
		if r.flag != "" && !strings.Contains(flags[r.name], r.flag) {
			t.Errorf("docs/architecture.md's row of role %s says it is turned on by %q, want %q in it", r.name, flags[r.name], r.flag)
		}
	}
}

// Every role is turned on by a serve flag, and off by default; what the
// Lease's check names (leaderWorks) and what runs (buildFeatures) come
// from the same table, so each role turned on yields one Work, and none
// with the defaults.
func TestEveryRoleIsTurnedOnByItsFlagAndYieldsAWork(t *testing.T) {
	defaults := parseServeFlags(t, "--policy=p.yaml")
	if w := defaults.leaderWorks(); len(w) != 0 {
		t.Errorf("the defaults turn on leader work %v, want none", w)
	}
	for _, r := range roles() {
		if r.leads(defaults) {
			t.Errorf("role %s is on by default", r.name)
		}
	}

	c := testHostContext(t, prometheus.NewRegistry(), everyRoleArgs...)
	var flags []string
	for _, r := range roles() {
		if !r.leads(c.o) {
			t.Errorf("role %s is off with %v", r.name, everyRoleArgs)
		}
		if r.flag != "" {
			flags = append(flags, r.flag)
		}
	}
	if got := c.o.leaderWorks(); strings.Join(got, ", ") != strings.Join(flags, ", ") {
		t.Errorf("leaderWorks() = %v, want every role's flag %v", got, flags)
	}
	if _, err := buildCore(c, nil); err != nil {
		t.Fatal(err)
	}
	h, err := buildFeatures(c)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.works) != len(roles()) {
		t.Errorf("%d Works for %d roles turned on", len(h.works), len(roles()))
	}
	if h.hook == nil || h.ready["holds"] == nil || len(h.tls) != 1 || len(h.serve) != 1 {
		t.Errorf("with every feature on: hook %v, ready checks %v, %d TLS options, %d serve runnables; want the holds' release and ready check, the managed certificate's TLS option and watcher", h.hook, h.ready, len(h.tls), len(h.serve))
	}
}

// A feature whose build disagrees with its leads is refused at start,
// naming it: the Lease would elect a replica for nothing, or run nothing
// it was elected for.
func TestAFeatureThatLeadsWithoutAWorkIsRefused(t *testing.T) {
	saved := features
	t.Cleanup(func() { features = saved })
	features = []feature{{name: "broken", flag: "--broken", leads: func(*serveOptions) bool { return true }, build: func(*hostContext) (parts, error) { return parts{}, nil }}}
	c := testHostContext(t, prometheus.NewRegistry(), everyRoleArgs...)
	if _, err := buildFeatures(c); err == nil || !strings.Contains(err.Error(), "feature broken: leads is true but its build gave no Work") {
		t.Errorf("buildFeatures = %v, want the broken feature named", err)
	}
}

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

	"clusterip-policy/internal/controllers/arming"
	"clusterip-policy/internal/controllers/backstop"
	"clusterip-policy/internal/controllers/holds"
	"clusterip-policy/internal/controllers/matchconditions"
	"clusterip-policy/internal/controllers/periodicaudit"
	"clusterip-policy/internal/controllers/policystatus"
	"clusterip-policy/internal/controllers/servingcerts"
	"clusterip-policy/internal/judged"
	"clusterip-policy/internal/readiness/readinesstest"
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

// roles is the one list of the leader's roles: a role is added there, with
// its flag and its Work, and in docs/architecture.md's table of roles; the
// test fails until both say the same, in the same order.
func TestTheRolesAreTheDocumentedOnes(t *testing.T) {
	seen := map[string]bool{}
	var names []string
	for _, r := range roles {
		for _, k := range []string{"name " + r.name, "flag " + r.flag} {
			if k != "flag " && seen[k] {
				t.Errorf("two roles have the %s", k)
			}
			seen[k] = true
		}
		if r.name == "" || r.on == nil || r.work == nil {
			t.Errorf("role %q has no name, on or work", r.name)
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
	for _, r := range roles {
		if r.flag != "" && !strings.Contains(flags[r.name], r.flag) {
			t.Errorf("docs/architecture.md's row of role %s says it is turned on by %q, want %q in it", r.name, flags[r.name], r.flag)
		}
	}
}

// Every role is turned on by a serve flag, and off by default; what the
// Lease's check names (leaderWorks) and what runs (leaderWorkList) come
// from the same table, so each role turned on yields one Work.
func TestEveryRoleIsTurnedOnByItsFlagAndYieldsAWork(t *testing.T) {
	if o := parseServeFlags(t, "--policy=p.yaml"); len(o.leaderWorks()) != 0 {
		t.Errorf("the defaults turn on leader work %v, want none", o.leaderWorks())
	}
	for _, r := range roles {
		if r.on(parseServeFlags(t, "--policy=p.yaml")) {
			t.Errorf("role %s is on by default", r.name)
		}
	}

	o := parseServeFlags(t, everyRoleArgs...)
	var flags []string
	for _, r := range roles {
		if !r.on(o) {
			t.Errorf("role %s is off with %v", r.name, everyRoleArgs)
		}
		if r.flag != "" {
			flags = append(flags, r.flag)
		}
	}
	if got := o.leaderWorks(); strings.Join(got, ", ") != strings.Join(flags, ", ") {
		t.Errorf("leaderWorks() = %v, want every role's flag %v", got, flags)
	}

	client := fake.NewClientset()
	reg := prometheus.NewRegistry()
	r := readinesstest.New(t, readinesstest.Spec, true, logr.Discard())
	status := policystatus.New(dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()), policystatus.Options{}, logr.Discard())
	p := &leaderParts{
		o: o, cfg: &rest.Config{Host: "https://127.0.0.1:1"}, client: client, log: logr.Discard(), gate: r.Gate, status: status,
		skip:       judged.NewScope(client, "m", "v", []string{"clusterip-policy"}, logr.Discard()),
		holdClient: client, holdWatch: holds.NewWatch(client), holdMetrics: holds.NewMetrics(reg),
		conditions:      matchconditions.New(client, r.Gate, o.conditions, logr.Discard(), matchconditions.NewMetrics(reg), status),
		certMetrics:     servingcerts.NewMetrics(reg),
		armingMetrics:   arming.NewMetrics(reg),
		backstopMetrics: backstop.NewMetrics(reg),
	}
	p.audit = periodicaudit.New(client, r.Gate, p.skip, o.audit.Interval, "test", logr.Discard(), periodicaudit.NewMetrics(reg), status)
	works, err := leaderWorkList(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(works) != len(roles) {
		t.Errorf("%d Works for %d roles turned on", len(works), len(roles))
	}
	for i, w := range works {
		if w == nil {
			t.Errorf("role %s yields no Work", roles[i].name)
		}
	}
}

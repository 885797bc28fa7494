package manifests

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// The chart's monitoring reads copies of manifests/monitoring's alerts and
// dashboard (a chart cannot read files outside its directory): they must be
// the same bytes, so an alert edited in one place is not lost in the other.
func TestChartMonitoringFilesAreTheBases(t *testing.T) {
	for _, f := range []string{AlertsFile, DashboardFile} {
		base, err := os.ReadFile(filepath.Join(MonitoringDir, f))
		if err != nil {
			t.Fatal(err)
		}
		chart, err := os.ReadFile(filepath.Join(chartDir, "files", f))
		if err != nil {
			t.Fatal(err)
		}
		if string(base) != string(chart) {
			t.Errorf("charts/clusterip-policy/files/%s differs from manifests/monitoring/%s; copy it", f, f)
		}
	}
}

// Each monitoring toggle renders its object, off by default, with the
// base's content: the PodMonitor's spec, the PrometheusRule's groups, the
// dashboard's JSON.
func TestChartMonitoringToggles(t *testing.T) {
	kinds := func(r renderedChart) map[string]map[string]any {
		out := map[string]map[string]any{}
		for _, m := range r.all {
			if k, _ := m["kind"].(string); k == "PodMonitor" || k == "PrometheusRule" || (k == "ConfigMap" && m["metadata"].(map[string]any)["name"] == "clusterip-policy-dashboard") {
				out[k] = m
			}
		}
		return out
	}
	if got := kinds(renderChart(t)); len(got) != 0 {
		t.Errorf("monitoring objects rendered by default: %v; they need the Prometheus Operator's CRDs", reflect.ValueOf(got).MapKeys())
	}
	got := kinds(renderChart(t, "--set", "monitoring.podMonitor.enabled=true", "--set", "monitoring.prometheusRule.enabled=true",
		"--set", "monitoring.dashboard.enabled=true", "--set", "monitoring.prometheusRule.labels.release=kps"))
	read := func(f string) map[string]any {
		b, err := os.ReadFile(filepath.Join(MonitoringDir, f))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	if pm, want := got["PodMonitor"], read("podmonitor.yaml"); pm == nil || !reflect.DeepEqual(pm["spec"], want["spec"]) {
		t.Errorf("the chart's PodMonitor spec %v, want manifests/monitoring/podmonitor.yaml's %v", pm["spec"], want["spec"])
	}
	pr, want := got["PrometheusRule"], read("prometheusrule.yaml")
	if pr == nil || !reflect.DeepEqual(pr["spec"], want["spec"]) {
		t.Error("the chart's PrometheusRule groups differ from manifests/monitoring/prometheusrule.yaml's")
	} else if pr["metadata"].(map[string]any)["labels"].(map[string]any)["release"] != "kps" {
		t.Error("monitoring.prometheusRule.labels did not reach the PrometheusRule")
	}
	dash, err := os.ReadFile(filepath.Join(MonitoringDir, DashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	cm := got["ConfigMap"]
	if cm == nil {
		t.Fatal("no dashboard ConfigMap with monitoring.dashboard.enabled")
	}
	if data := cm["data"].(map[string]any)["clusterip-policy.json"]; data != string(dash) {
		t.Error("the dashboard ConfigMap's clusterip-policy.json is not manifests/monitoring/dashboard.json")
	}
	if cm["metadata"].(map[string]any)["labels"].(map[string]any)["grafana_dashboard"] != "1" {
		t.Error("the dashboard ConfigMap lacks the Grafana sidecar's label grafana_dashboard=1")
	}
}

// monitoring.serviceMonitor renders a ServiceMonitor with its scrape
// settings and a headless Service of the pods' metrics port that it
// selects, as job clusterip-policy-webhook (the alerts' job); beside the
// PodMonitor it is refused (every series would be scraped twice).
func TestChartServiceMonitor(t *testing.T) {
	r := renderChart(t, "--set", "monitoring.serviceMonitor.enabled=true", "--set", "monitoring.serviceMonitor.namespace=monitoring",
		"--set", "monitoring.serviceMonitor.interval=30s", "--set", "monitoring.serviceMonitor.scrapeTimeout=20s",
		"--set", "monitoring.serviceMonitor.labels.release=kps",
		"--set", "monitoring.serviceMonitor.relabelings[0].targetLabel=cluster", "--set", "monitoring.serviceMonitor.relabelings[0].replacement=prod")
	var sm, svc map[string]any
	for _, m := range r.all {
		md := m["metadata"].(map[string]any)
		switch {
		case m["kind"] == "ServiceMonitor":
			sm = m
		case m["kind"] == "Service" && md["name"] == "clusterip-policy-webhook-metrics":
			svc = m
		}
	}
	if sm == nil || svc == nil {
		t.Fatalf("ServiceMonitor %v, metrics Service %v", sm != nil, svc != nil)
	}
	md := sm["metadata"].(map[string]any)
	if md["namespace"] != "monitoring" || md["labels"].(map[string]any)["release"] != "kps" {
		t.Errorf("ServiceMonitor metadata %v", md)
	}
	spec := sm["spec"].(map[string]any)
	ep := spec["endpoints"].([]any)[0].(map[string]any)
	if ep["port"] != "metrics" || ep["interval"] != "30s" || ep["scrapeTimeout"] != "20s" || spec["jobLabel"] != "app.kubernetes.io/name" {
		t.Errorf("ServiceMonitor spec %v", spec)
	}
	if rl := ep["relabelings"].([]any)[0].(map[string]any); rl["targetLabel"] != "cluster" || rl["replacement"] != "prod" {
		t.Errorf("relabelings %v", ep["relabelings"])
	}
	sel := spec["selector"].(map[string]any)["matchLabels"].(map[string]any)
	labels := svc["metadata"].(map[string]any)["labels"].(map[string]any)
	for k, v := range sel {
		if labels[k] != v {
			t.Errorf("the ServiceMonitor selects %s=%v; the metrics Service has %v", k, v, labels[k])
		}
	}
	if labels["app.kubernetes.io/name"] != "clusterip-policy-webhook" {
		t.Errorf("job label: the metrics Service's app.kubernetes.io/name is %v, want the alerts' job clusterip-policy-webhook", labels["app.kubernetes.io/name"])
	}
	if _, err := helmTemplate(t, "--set", "monitoring.serviceMonitor.enabled=true", "--set", "monitoring.podMonitor.enabled=true"); err == nil || !strings.Contains(err.Error(), "scraped twice") {
		t.Errorf("serviceMonitor beside podMonitor: %v, want the refusal", err)
	}
}

// ClusterIPPolicyHoldsNoLeader was renamed ClusterIPPolicyNoLeader (it now
// fires whatever leader work is on): values that tune the old name still
// tune the new alert for one release, so an upgrade with them neither
// fails on "no such alert" nor silently turns a disabled alert back on,
// and the new name's entry wins when both are given.
func TestChartRenamedAlertKeepsItsOldValues(t *testing.T) {
	rules := func(args ...string) map[string]Rule {
		rf := renderedRules(t, append([]string{"--set", "monitoring.prometheusRule.enabled=true"}, args...)...)
		got := map[string]Rule{}
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				got[r.Alert] = r
			}
		}
		if _, ok := got["ClusterIPPolicyHoldsNoLeader"]; ok {
			t.Errorf("%v: the old alert name is rendered too (two pages for one missing leader)", args)
		}
		return got
	}
	if _, ok := rules("--set", "monitoring.prometheusRule.disabled.ClusterIPPolicyHoldsNoLeader=true")["ClusterIPPolicyNoLeader"]; ok {
		t.Error("disabled.ClusterIPPolicyHoldsNoLeader=true: ClusterIPPolicyNoLeader still rendered")
	}
	if r := rules("--set", "monitoring.prometheusRule.customRules.ClusterIPPolicyHoldsNoLeader.for=15m")["ClusterIPPolicyNoLeader"]; r.For != "15m" {
		t.Errorf("customRules.ClusterIPPolicyHoldsNoLeader.for=15m: ClusterIPPolicyNoLeader for %q", r.For)
	}
	if r := rules("--set", "monitoring.prometheusRule.customRules.ClusterIPPolicyHoldsNoLeader.for=15m",
		"--set", "monitoring.prometheusRule.customRules.ClusterIPPolicyNoLeader.for=7m")["ClusterIPPolicyNoLeader"]; r.For != "7m" {
		t.Errorf("both names in customRules: ClusterIPPolicyNoLeader for %q, want the new name's 7m", r.For)
	}
	if _, ok := rules("--set", "monitoring.prometheusRule.disabled.ClusterIPPolicyHoldsNoLeader=true",
		"--set", "monitoring.prometheusRule.disabled.ClusterIPPolicyNoLeader=false")["ClusterIPPolicyNoLeader"]; !ok {
		t.Error("disabled: old name true, new name false: ClusterIPPolicyNoLeader left out, want the new name's false")
	}
}

// The values monitoring.prometheusRule.* tune the alerts: disabled leaves
// an alert out (and a group with none left), customRules sets for,
// severity and labels, additionalRuleLabels reach every chart alert (not
// the user's), capacity moves the levels in the expression and the
// description, extraRules are appended to the group clusterip-policy.
// promtool runs the tuned rules in TestChartTunedAlertsWithPromtool.
func TestChartPrometheusRuleValues(t *testing.T) {
	rf := renderedRules(t, append(append([]string{}, chartTunedAlertValues...),
		"--set", "monitoring.prometheusRule.disabled.ClusterIPPolicyDenialsRising=true",
		"--set", "monitoring.prometheusRule.disabled.ClusterIPPolicyViewStale=false",
		"--set", "monitoring.prometheusRule.disabled.ClusterIPPolicyWebhookUnreachable=true",
		"--set", "monitoring.prometheusRule.disabled.ClusterIPPolicyWebhookNotRegistered=true",
		"--set", "monitoring.prometheusRule.disabled.ClusterIPPolicyReachabilityProbeRefused=true",
		"--set", "monitoring.prometheusRule.customRules.ClusterIPPolicyWebhookDown.for=10m",
		"--set", "monitoring.prometheusRule.customRules.ClusterIPPolicyWebhookDown.severity=warning",
		"--set", "monitoring.prometheusRule.capacity.reservedRange.warning.usedPercent=null",
		"--set", "monitoring.prometheusRule.capacity.reservedRange.warning.freeAddresses=4",
	)...)
	base := loadRulesFile(t)
	baseRules := map[string]Rule{}
	for _, g := range base.Groups {
		for _, r := range g.Rules {
			baseRules[r.Alert] = r
		}
	}
	got := map[string]Rule{}
	var groups []string
	for _, g := range rf.Groups {
		groups = append(groups, g.Name)
		for _, r := range g.Rules {
			got[r.Alert] = r
		}
		if g.Name == "clusterip-policy" && g.Rules[len(g.Rules)-1].Alert != "MyTeamWebhookScrapeDown" {
			t.Errorf("extraRules: the group clusterip-policy ends with %q, want the extra rule", g.Rules[len(g.Rules)-1].Alert)
		}
	}
	if len(groups) != 1 {
		t.Errorf("groups %v: the reachability group, all of whose alerts are disabled, is still rendered", groups)
	}
	for _, name := range []string{"ClusterIPPolicyDenialsRising", "ClusterIPPolicyWebhookUnreachable"} {
		if _, ok := got[name]; ok {
			t.Errorf("%s rendered though disabled", name)
		}
	}
	if _, ok := got["ClusterIPPolicyViewStale"]; !ok {
		t.Error("ClusterIPPolicyViewStale left out though disabled is false")
	}
	for name, r := range got {
		if name == "MyTeamWebhookScrapeDown" {
			if r.Labels["cluster"] != "" || r.Labels["team"] != "netops" || r.For != "2m" {
				t.Errorf("extra rule %+v: want its own labels only (additionalRuleLabels are the chart's alerts')", r)
			}
			continue
		}
		if r.Labels["cluster"] != "prod" {
			t.Errorf("%s labels %v: no cluster=prod from additionalRuleLabels", name, r.Labels)
		}
	}
	if r := got["ClusterIPPolicyWebhookDown"]; r.For != "10m" || r.Labels["severity"] != "warning" {
		t.Errorf("ClusterIPPolicyWebhookDown for %q severity %q, want customRules' 10m, warning", r.For, r.Labels["severity"])
	}
	if r := got["ClusterIPPolicyDynamicBandFilling"]; r.For != "1m" || r.Labels["severity"] != "page" || r.Labels["team"] != "netops" ||
		!strings.Contains(r.Expr, "<= 0.5 * sum") || !strings.Contains(r.Annotations["description"], "(the alert fires at 50% used, 50% or less free, of what the allocator may use there)") {
		t.Errorf("ClusterIPPolicyDynamicBandFilling tuned to 50%% for 1m, severity page, team netops: %+v", r)
	}
	if r := got["ClusterIPPolicyReservedRangeFilling"]; !strings.HasSuffix(r.Expr, ") <= 4") || !strings.Contains(r.Annotations["description"], "(the alert fires at 4 or fewer free addresses)") {
		t.Errorf("ClusterIPPolicyReservedRangeFilling at 4 free addresses: expr %q description %q", r.Expr, r.Annotations["description"])
	}
	if r := got["ClusterIPPolicyReservedRangeFull"]; !strings.HasSuffix(r.Expr, ") <= 2") {
		t.Errorf("ClusterIPPolicyReservedRangeFull at 2 free addresses: expr %q", r.Expr)
	}
	// What no value touched stays the file's.
	if r, b := got["ClusterIPPolicyCertificateExpiresSoon"], baseRules["ClusterIPPolicyCertificateExpiresSoon"]; r.Expr != b.Expr || r.For != b.For || r.Annotations["description"] != b.Annotations["description"] {
		t.Errorf("ClusterIPPolicyCertificateExpiresSoon changed: %+v, want %+v", r, b)
	}
	// Both forms of a level together: either fires.
	r := renderedRules(t, "--set", "monitoring.prometheusRule.enabled=true",
		"--set", "monitoring.prometheusRule.capacity.dynamicBand.critical.freeAddresses=10")
	for _, g := range r.Groups {
		for _, rule := range g.Rules {
			if rule.Alert == "ClusterIPPolicyDynamicBandFull" && !(strings.HasPrefix(rule.Expr, "(") && strings.Contains(rule.Expr, "<= 0.05 * sum") && strings.HasSuffix(rule.Expr, ") or (max without (instance, pod, state) (clusterip_policy_band_addresses{band=\"dynamic\", state=\"free\"}) <= 10)")) {
				t.Errorf("ClusterIPPolicyDynamicBandFull at 95%% used or 10 free: %q", rule.Expr)
			}
		}
	}
}

// A tuning that cannot be what was meant is refused at render, naming the
// value and the fix: an alert name the chart does not have (a typo would
// leave the alert on), a level out of range, a warning past its critical,
// a level with neither form, a label Prometheus refuses, a bad duration.
func TestChartPrometheusRuleValuesRefused(t *testing.T) {
	on := []string{"--set", "monitoring.prometheusRule.enabled=true"}
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"unknown disabled", []string{"--set", "monitoring.prometheusRule.disabled.ClusterIPPolicyWebhookDwon=true"},
			[]string{"monitoring.prometheusRule.disabled.ClusterIPPolicyWebhookDwon: no such alert", "ClusterIPPolicyWebhookDown, ", "ClusterIPPolicyReachabilityProbeRefused"}},
		{"unknown customRules", []string{"--set", "monitoring.prometheusRule.customRules.DynamicBandFull.severity=page"},
			[]string{"monitoring.prometheusRule.customRules.DynamicBandFull: no such alert", "ClusterIPPolicyDynamicBandFull"}},
		{"usedPercent over 100", []string{"--set", "monitoring.prometheusRule.capacity.dynamicBand.warning.usedPercent=101"},
			[]string{"/monitoring/prometheusRule/capacity/dynamicBand/warning/usedPercent", "maximum"}},
		{"usedPercent 0", []string{"--set", "monitoring.prometheusRule.capacity.reservedRange.warning.usedPercent=0"},
			[]string{"/monitoring/prometheusRule/capacity/reservedRange/warning/usedPercent", "exclusiveMinimum"}},
		{"negative freeAddresses", []string{"--set", "monitoring.prometheusRule.capacity.reservedRange.critical.freeAddresses=-1"},
			[]string{"/monitoring/prometheusRule/capacity/reservedRange/critical/freeAddresses", "minimum"}},
		{"warning past critical", []string{"--set", "monitoring.prometheusRule.capacity.dynamicBand.warning.usedPercent=95"},
			[]string{"monitoring.prometheusRule.capacity.dynamicBand: warning.usedPercent 95 is not below critical.usedPercent 95"}},
		{"warning addresses under critical", []string{"--set", "monitoring.prometheusRule.capacity.reservedRange.warning.freeAddresses=0"},
			[]string{"monitoring.prometheusRule.capacity.reservedRange: warning.freeAddresses 0 is not above critical.freeAddresses 0"}},
		{"no level", []string{"--set", "monitoring.prometheusRule.capacity.reservedRange.critical.freeAddresses=null"},
			[]string{"monitoring.prometheusRule.capacity.reservedRange.critical: neither usedPercent nor freeAddresses is set"}},
		{"bad label name", []string{"--set", "monitoring.prometheusRule.additionalRuleLabels.team-name=x"},
			[]string{`monitoring.prometheusRule.additionalRuleLabels: "team-name" is not a Prometheus label name`}},
		{"bad customRules label", []string{"--set", "monitoring.prometheusRule.customRules.ClusterIPPolicyWebhookDown.labels.a\\.b=x"},
			[]string{`monitoring.prometheusRule.customRules.ClusterIPPolicyWebhookDown.labels: "a.b" is not a Prometheus label name`}},
		{"bad for", []string{"--set", "monitoring.prometheusRule.customRules.ClusterIPPolicyWebhookDown.for=5 minutes"},
			[]string{"/monitoring/prometheusRule/customRules/ClusterIPPolicyWebhookDown/for", "does not match pattern"}},
		{"extra rule without a name", []string{"--set-json", `monitoring.prometheusRule.extraRules=[{"expr":"up == 0"}]`},
			[]string{"/monitoring/prometheusRule/extraRules/0", "missing property 'alert'"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := helmTemplate(t, append(append([]string{}, on...), c.args...)...)
			if err == nil {
				t.Fatalf("%v rendered; want a refusal", c.args)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v: the refusal does not say %q:\n%v", c.args, w, err)
				}
			}
		})
	}
}

// metrics.secure turns on --metrics-secure, grants the webhook create on
// tokenreviews and subjectaccessreviews (and nothing else: rbacExact),
// renders the scrapers' ClusterRole bound to no one, and makes both
// monitors scrape over HTTPS with a token: the ServiceMonitor Prometheus'
// own, the PodMonitor the Secret it is given (without one, the render is
// refused naming the fix). Off, none of it.
func TestChartSecureMetrics(t *testing.T) {
	endpoint := func(r renderedChart, kind, list string) map[string]any {
		for _, m := range r.all {
			if m["kind"] == kind {
				return m["spec"].(map[string]any)[list].([]any)[0].(map[string]any)
			}
		}
		t.Fatalf("no %s rendered", kind)
		return nil
	}
	secureFlag := func(r renderedChart) bool {
		_, ok := flagValue(&r.objects.Deployments[0].Spec.Template.Spec.Containers[0], "metrics-secure")
		return ok
	}
	reviews := func(r renderedChart) (grants []string) {
		for _, role := range r.objects.ClusterRoles {
			for _, rule := range role.Rules {
				for _, res := range rule.Resources {
					if res == "tokenreviews" || res == "subjectaccessreviews" {
						grants = append(grants, role.Name+": "+strings.Join(rule.APIGroups, ",")+"/"+res+" "+strings.Join(rule.Verbs, ","))
					}
				}
			}
		}
		return grants
	}
	reader := func(r renderedChart) *rbacv1.ClusterRole {
		for _, role := range r.objects.ClusterRoles {
			if role.Name == metricsReaderRole {
				return role
			}
		}
		return nil
	}

	plain := renderChart(t, "--set", "monitoring.serviceMonitor.enabled=true")
	if e := endpoint(plain, "ServiceMonitor", "endpoints"); secureFlag(plain) || e["scheme"] != nil || e["bearerTokenFile"] != nil || len(reviews(plain)) != 0 || reader(plain) != nil {
		t.Errorf("by default: --metrics-secure %t, ServiceMonitor endpoint %v, review grants %v, reader role %v; want plain HTTP and none of them", secureFlag(plain), e, reviews(plain), reader(plain) != nil)
	}

	sm := renderChart(t, "--set", "metrics.secure=true", "--set", "monitoring.serviceMonitor.enabled=true")
	if !secureFlag(sm) {
		t.Error("metrics.secure did not reach the container as --metrics-secure")
	}
	if e := endpoint(sm, "ServiceMonitor", "endpoints"); e["scheme"] != "https" || e["bearerTokenFile"] != "/var/run/secrets/kubernetes.io/serviceaccount/token" ||
		e["tlsConfig"].(map[string]any)["insecureSkipVerify"] != true {
		t.Errorf("ServiceMonitor endpoint with metrics.secure: %v; want https, Prometheus' token, the self-signed certificate accepted", e)
	}
	want := []string{"clusterip-policy-webhook: authentication.k8s.io/tokenreviews create", "clusterip-policy-webhook: authorization.k8s.io/subjectaccessreviews create"}
	if got := reviews(sm); !slices.Equal(got, want) {
		t.Errorf("review grants with metrics.secure: %v, want %v", got, want)
	}
	role := reader(sm)
	if role == nil || !isMetricsReader(role) {
		t.Errorf("with metrics.secure, ClusterRole %s: %+v; want get on the non-resource URL /metrics alone", metricsReaderRole, role)
	}
	for _, b := range sm.objects.ClusterRoleBindings {
		if b.RoleRef.Name == metricsReaderRole {
			t.Errorf("ClusterRoleBinding %s binds %s: the operator binds the scraper, the chart no one", b.Name, metricsReaderRole)
		}
	}
	for _, p := range rbacExact(sm.objects) {
		t.Error(p)
	}

	pm := renderChart(t, "--set", "metrics.secure=true", "--set", "monitoring.podMonitor.enabled=true", "--set", "monitoring.podMonitor.tokenSecret.name=prom-token")
	e := endpoint(pm, "PodMonitor", "podMetricsEndpoints")
	auth, _ := e["authorization"].(map[string]any)
	if creds, _ := auth["credentials"].(map[string]any); e["scheme"] != "https" || auth["type"] != "Bearer" || creds["name"] != "prom-token" || creds["key"] != "token" {
		t.Errorf("PodMonitor endpoint with metrics.secure: %v; want https and a Bearer token from the Secret prom-token's key token", e)
	}
	_, err := helmTemplate(t, "--set", "metrics.secure=true", "--set", "monitoring.podMonitor.enabled=true")
	if err == nil || !strings.Contains(err.Error(), "needs monitoring.podMonitor.tokenSecret") {
		t.Errorf("metrics.secure with a PodMonitor and no token Secret: %v; want a refusal naming monitoring.podMonitor.tokenSecret", err)
	}
	if _, err := helmTemplate(t, "--set", "metrics.secure=yes"); err == nil {
		t.Error("metrics.secure=yes rendered; want the schema's boolean refusal")
	}
}

package manifests

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

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

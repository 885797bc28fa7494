package manifests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"clusterip-policy/certs"
	"clusterip-policy/internal/testutil"
)

// The Helm chart must carry the same objects and the same safety properties
// as the kustomize base: these tests render it with the helm built by
// hack/build-tools.sh and run safetyChecks over the result.

const chartDir = "../charts/clusterip-policy"

// helmBinary is the helm of hack/build-tools.sh, or a skip that says how to get it.
func helmBinary(t *testing.T) string {
	t.Helper()
	bin, err := filepath.Abs(filepath.Join("..", ".local", "bin", "helm"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		testutil.MissingTool(t, "no helm at %s (run hack/build-tools.sh): %v", bin, err)
	}
	return bin
}

// chartRequiredArgs are what the chart cannot default: the DNS address
// (helm template cannot read it from a cluster) and the Kubernetes version
// (helm template assumes v1.20.0, which Chart.yaml's kubeVersion refuses).
// Tests that need either different give it again (later arguments win).
var chartRequiredArgs = []string{"--set", "dns.clusterIP=10.96.0.10", "--kube-version", "1.37.2"}

// helmTemplate renders the chart into the namespace the base uses, with
// extra helm arguments (--set ...), and returns helm's output or its error
// with stderr.
func helmTemplate(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, helmBinary(t), append(append([]string{"template", "clusterip-policy", chartDir, "--namespace", ownNamespace}, chartRequiredArgs...), args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, errors.New(strings.TrimSpace(stderr.String()) + ": " + err.Error())
	}
	return stdout.Bytes(), nil
}

// renderedChart is the chart rendered by helm: the kinds the safety checks
// know, decoded strictly, and the rest (the TLS Secret, cert-manager's
// objects) as plain maps.
type renderedChart struct {
	objects *objects
	secrets []*corev1.Secret
	other   []map[string]any // cert-manager Issuers and Certificates, the monitoring objects
	all     []map[string]any
}

func renderChart(t *testing.T, args ...string) renderedChart {
	t.Helper()
	out, err := helmTemplate(t, args...)
	if err != nil {
		t.Fatalf("helm template %s: %v", strings.Join(args, " "), err)
	}
	docs, err := SplitYAML(out)
	if err != nil {
		t.Fatalf("helm template output: %v", err)
	}
	r := renderedChart{objects: &objects{}}
	for i, doc := range docs {
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			t.Fatalf("document %d: %v", i+1, err)
		}
		r.all = append(r.all, m)
		switch {
		case m["apiVersion"] == "v1" && m["kind"] == "Secret":
			if err := add(&r.secrets, doc); err != nil {
				t.Fatalf("document %d (Secret): %v", i+1, err)
			}
		case m["apiVersion"] == "cert-manager.io/v1", m["apiVersion"] == "monitoring.coreos.com/v1":
			r.other = append(r.other, m)
		default:
			if err := r.objects.decode(doc); err != nil {
				t.Fatalf("document %d: %v", i+1, err)
			}
		}
	}
	return r
}

var chartValueSets = []struct {
	name string
	args []string
}{
	{"default values (managed certificates)", nil},
	{"cert-manager", []string{"--set", "certificate.source=certManager"}},
	{"cert-manager with an issuer of your own", []string{"--set", "certificate.source=certManager", "--set", "certificate.certManager.issuerRef.kind=ClusterIssuer", "--set", "certificate.certManager.issuerRef.name=corp-ca"}},
	{"a Secret of your own", existingSecretArgs},
	{"the policy from the ConfigMap", []string{"--set", "policySource=file"}},
}

func TestChartIsSafe(t *testing.T) {
	for _, vs := range chartValueSets {
		t.Run(vs.name, func(t *testing.T) {
			o := renderChart(t, vs.args...).objects
			for _, sc := range safetyChecks {
				t.Run(sc.name, func(t *testing.T) {
					for _, p := range sc.check(o) {
						t.Error(p)
					}
				})
			}
		})
	}
}

// Every object of the base is in the chart, under the same kind, namespace
// and name, and the chart adds only the TLS material.
func TestChartHasTheBaseObjects(t *testing.T) {
	chart := renderChart(t).objects
	names := func(o *objects) map[string]bool {
		set := map[string]bool{}
		for _, m := range o.metas() {
			set[m.Namespace+"/"+m.Name] = true
		}
		for _, c := range o.Mutating {
			set["mutating/"+c.Name] = true
		}
		for _, c := range o.Validating {
			set["validating/"+c.Name] = true
		}
		return set
	}
	base := loadBase(t)
	// The namespace is helm's (--namespace --create-namespace), as for any chart.
	base.Namespaces = nil
	// The quota that admits the chart's system-cluster-critical pods
	// (criticalPodsQuota) is the chart's alone: the base sets no priority
	// class (helm_resourcequota_test.go).
	if len(chart.ResourceQuotas) != 1 || chart.ResourceQuotas[0].Name != "clusterip-policy-critical-pods" {
		t.Errorf("the chart renders ResourceQuotas %v, want clusterip-policy-critical-pods alone", chart.ResourceQuotas)
	}
	chart.ResourceQuotas = nil
	want, got := names(base), names(chart)
	if !reflect.DeepEqual(want, got) {
		t.Errorf("the chart renders %v, the base has %v", got, want)
	}
	if len(chart.Namespaces) != 0 {
		t.Error("the chart renders a Namespace; helm creates the release namespace")
	}
}

// The webhooks the chart renders with default values are the base's,
// field for field, but for the caBundle the base leaves to its overlays:
// the matchConditions above all, which must stay what the e2e tests proved.
func TestChartWebhooksMatchTheBase(t *testing.T) {
	chart, base := renderChart(t).objects, loadBase(t)
	if len(chart.Mutating) != 1 || len(chart.Validating) != 1 {
		t.Fatalf("the chart renders %d mutating and %d validating configurations, want 1 and 1", len(chart.Mutating), len(chart.Validating))
	}
	for i := range chart.Mutating[0].Webhooks {
		chart.Mutating[0].Webhooks[i].ClientConfig.CABundle = nil
	}
	for i := range chart.Validating[0].Webhooks {
		chart.Validating[0].Webhooks[i].ClientConfig.CABundle = nil
	}
	if !reflect.DeepEqual(chart.Mutating[0].Webhooks, base.Mutating[0].Webhooks) {
		t.Errorf("the chart's mutating webhooks differ from manifests/base:\nchart: %+v\nbase:  %+v", chart.Mutating[0].Webhooks, base.Mutating[0].Webhooks)
	}
	if !reflect.DeepEqual(chart.Validating[0].Webhooks, base.Validating[0].Webhooks) {
		t.Errorf("the chart's validating webhooks differ from manifests/base:\nchart: %+v\nbase:  %+v", chart.Validating[0].Webhooks, base.Validating[0].Webhooks)
	}
	for _, c := range chart.Mutating {
		if c.Labels[installLabel] != "webhook-configuration" {
			t.Errorf("MutatingWebhookConfiguration %s lacks %s=webhook-configuration", c.Name, installLabel)
		}
	}
	// The Deployment's pod template is the base's but for the labels helm
	// adds and two defaults only the chart has: the priority class (the base
	// leaves it to an overlay, as a ResourceQuota configuration may restrict
	// system-cluster-critical to kube-system) and the Linux node selector.
	pod := &chart.Deployments[0].Spec.Template.Spec
	if pod.PriorityClassName != "system-cluster-critical" || !reflect.DeepEqual(pod.NodeSelector, map[string]string{"kubernetes.io/os": "linux"}) {
		t.Errorf("the chart's default priorityClassName %q and nodeSelector %v, want system-cluster-critical and kubernetes.io/os=linux", pod.PriorityClassName, pod.NodeSelector)
	}
	pod.PriorityClassName, pod.NodeSelector = "", nil
	if !reflect.DeepEqual(chart.Deployments[0].Spec, base.Deployments[0].Spec) {
		t.Errorf("the chart's Deployment spec differs from manifests/base:\nchart: %+v\nbase:  %+v", chart.Deployments[0].Spec, base.Deployments[0].Spec)
	}
	if !reflect.DeepEqual(chart.ClusterRoles[0].Rules, base.ClusterRoles[0].Rules) || !reflect.DeepEqual(chart.Roles[0].Rules, base.Roles[0].Rules) {
		t.Error("the chart's RBAC rules differ from manifests/base")
	}
	// Told to reserve no DNS address, the chart writes the base's policy:
	// nothing stated, warn.
	noDNS := renderChart(t, "--set", "dns.reserve=false").objects
	if len(noDNS.Policies) != 1 || len(base.Policies) != 1 || !sameJSON(noDNS.Policies[0].Spec, base.Policies[0].Spec) {
		t.Errorf("the chart's policy object with dns.reserve=false differs from manifests/base/clusterippolicy.yaml")
	}
	if len(chart.ConfigMaps) != 0 {
		t.Errorf("with policySource crd the chart renders %d ConfigMaps; nothing would read them", len(chart.ConfigMaps))
	}
}

// existingSecretArgs: certificate.source=existingSecret with a CA of the
// test's own.
var existingSecretArgs = []string{"--set", "certificate.source=existingSecret", "--set", "certificate.existingSecret=corp-webhook-tls",
	"--set-string", "certificate.caBundle=" + string(must(certs.NewCA("corp-ca", time.Hour)).CertPEM)}

// caBundles returns the caBundle of every webhook the chart renders.
func caBundles(o *objects) [][]byte {
	var out [][]byte
	for _, c := range o.Mutating {
		for _, w := range c.Webhooks {
			out = append(out, w.ClientConfig.CABundle)
		}
	}
	for _, c := range o.Validating {
		for _, w := range c.Webhooks {
			out = append(out, w.ClientConfig.CABundle)
		}
	}
	return out
}

// With the default (managed) certificates the chart renders no Secret, no
// caBundle and no certificate volume: the webhook makes them, so nothing
// in the render changes from one render to the next, and a re-applied
// render (GitOps) never reverts the caBundle the leader wrote. The
// container runs --certificate-source=managed with the values' lifetimes,
// and the Role names exactly the two Secrets.
func TestChartManagedCertificatesRenderNothingGenerated(t *testing.T) {
	r := renderChart(t)
	if len(r.secrets) != 0 {
		t.Errorf("the chart renders %d Secrets; the webhook makes %s", len(r.secrets), tlsSecret)
	}
	for i, b := range caBundles(r.objects) {
		if len(b) != 0 {
			t.Errorf("webhook %d carries a caBundle; the leader writes it", i)
		}
	}
	c := r.objects.Deployments[0].Spec.Template.Spec.Containers[0]
	for flag, want := range map[string]string{"certificate-source": "managed", "cert-validity": "2160h", "ca-validity": "43800h"} {
		if v, _ := flagValue(&c, flag); v != want {
			t.Errorf("--%s=%q, want %q", flag, v, want)
		}
	}
	if v, ok := flagValue(&c, "cert-dir"); ok {
		t.Errorf("--cert-dir=%s with managed certificates; the webhook refuses both", v)
	}
	if len(r.objects.Deployments[0].Spec.Template.Spec.Volumes) != 0 {
		t.Error("the pods mount a volume; the managed certificate is read through the API")
	}
	short := renderChart(t, "--set", "certificate.managed.validity=30s", "--set", "certificate.managed.caValidity=1m").objects.Deployments[0].Spec.Template.Spec.Containers[0]
	if v, _ := flagValue(&short, "cert-validity"); v != "30s" {
		t.Errorf("certificate.managed.validity did not reach --cert-validity: %q", v)
	}
	if v, _ := flagValue(&short, "ca-validity"); v != "1m" {
		t.Errorf("certificate.managed.caValidity did not reach --ca-validity: %q", v)
	}
	// Byte-identical renders of the same values, for every source.
	for _, vs := range chartValueSets {
		a, err := helmTemplate(t, vs.args...)
		if err != nil {
			t.Fatal(err)
		}
		b, err := helmTemplate(t, vs.args...)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s: two renders of the same values differ", vs.name)
		}
	}
	// Without managed certificates the webhook is granted no Secret.
	for _, args := range [][]string{{"--set", "certificate.source=certManager"}, existingSecretArgs} {
		for _, role := range renderChart(t, args...).objects.Roles {
			for _, rule := range role.Rules {
				if slices.Contains(rule.Resources, "secrets") {
					t.Errorf("%v: Role %s grants Secrets", args, role.Name)
				}
			}
		}
	}
}

// certificate.source=existingSecret mounts the Secret given and writes the
// CA given into every webhook.
func TestChartExistingSecretMountsItAndTrustsTheCAGiven(t *testing.T) {
	r := renderChart(t, existingSecretArgs...)
	if len(r.secrets) != 0 {
		t.Errorf("the chart renders %d Secrets; the Secret is yours", len(r.secrets))
	}
	want := []byte(existingSecretArgs[len(existingSecretArgs)-1][len("certificate.caBundle="):])
	bundles := caBundles(r.objects)
	if len(bundles) != 4 {
		t.Fatalf("%d webhooks, want 4", len(bundles))
	}
	for i, b := range bundles {
		if !bytes.Equal(b, want) {
			t.Errorf("webhook %d: caBundle is not certificate.caBundle", i)
		}
	}
	pod := r.objects.Deployments[0].Spec.Template.Spec
	if len(pod.Volumes) != 1 || pod.Volumes[0].Secret == nil || pod.Volumes[0].Secret.SecretName != "corp-webhook-tls" {
		t.Errorf("volumes %+v, want the Secret corp-webhook-tls", pod.Volumes)
	}
	if v, _ := flagValue(&pod.Containers[0], "cert-dir"); v != "/tls" {
		t.Errorf("--cert-dir=%q", v)
	}
}

func TestChartCertManagerInjectsTheCAIntoBothWebhooks(t *testing.T) {
	r := renderChart(t, "--set", "certificate.source=certManager")
	if len(r.secrets) != 0 {
		t.Errorf("with cert-manager the chart renders %d Secrets; cert-manager writes %s", len(r.secrets), tlsSecret)
	}
	var configs []map[string]any
	for _, m := range r.all {
		if k := m["kind"]; k == "MutatingWebhookConfiguration" || k == "ValidatingWebhookConfiguration" {
			configs = append(configs, m)
			if strings.Contains(string(must(yaml.Marshal(m))), "caBundle") {
				t.Errorf("%s carries a caBundle; the cainjector sets it", k)
			}
		}
	}
	for _, p := range certManagerInjection(configs, r.other, deploymentName) {
		t.Error(p)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// Values that would make the install unsafe or broken are refused by helm
// (values.schema.json first, the templates' own checks behind it, which
// --skip-schema-validation reaches) with a message that names the value.
func TestChartRefusesUnsafeValues(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--set", "replicas=1"}, "at '/replicas': minimum: got 1, want 2"},
		{[]string{"--set", "replicas=1", "--skip-schema-validation"}, "replicas: 1 is fewer than 2"},
		{[]string{"--set", "replica=3"}, "additional properties 'replica' not allowed"},
		{[]string{"--set", "webhook.failurePolicy=Fial"}, "at '/webhook/failurePolicy': value must be one of 'Fail', 'Ignore'"},
		{[]string{"--set", "webhook.failurePolicy=Fial", "--skip-schema-validation"}, `webhook.failurePolicy: "Fial" is neither Fail nor Ignore`},
		{[]string{"--set", "webhook.excludedNamespaces={kube-system}"}, "webhook.excludedNamespaces: kube-system"},
		{[]string{"--set", "webhook.failurePolicy=Ignore"}, `webhook.armFailurePolicy: the leader arms the Service webhooks to failurePolicy Fail once the apiserver reaches a ready replica, but webhook.failurePolicy is "Ignore"; set webhook.armFailurePolicy=false`},
		{[]string{"--set", "webhook.auditInterval=0s"}, "webhook.armFailurePolicy needs webhook.auditInterval: while the Service webhooks are not armed"},
		{[]string{"--set", "webhook.armFailurePolicy=maybe"}, "at '/webhook/armFailurePolicy': got string, want boolean"},
		{[]string{"--set", "crdUpgrade=maybe"}, "at '/crdUpgrade': got string, want boolean"},
		{[]string{"--set", "webhook.excludedNamespaces={Bad_NS}"}, "'Bad_NS' does not match pattern"},
		{[]string{"--set", "webhook.excludedNamespaces={ci,default}"}, "webhook.excludedNamespaces: default must stay covered"},
		{[]string{"--set", "webhook.auditInterval=5x"}, "at '/webhook/auditInterval': '5x' does not match pattern"},
		{[]string{"--kube-version", "1.33.9"}, "chart requires kubeVersion: >=1.34.0-0 which is incompatible with Kubernetes v1.33.9"},
		{[]string{"--set", "global.imageRegistry=x", "--set", "globl.x=1"}, "additional properties 'globl' not allowed"},
		{[]string{"--set", "dns.clusterIP="}, "dns.clusterIP is required: the chart reserves the cluster DNS address for kube-system/kube-dns and will not guess it"},
		{[]string{"--set", "dns.clusterIP=10.96.0.300x"}, `dns.clusterIP: "10.96.0.300x" is not an IP address`},
		{[]string{"--set", "dns.service=kube-dns"}, "at '/dns/service': 'kube-dns' does not match pattern"},
		{[]string{"--set", "enforcement=block"}, "at '/enforcement': value must be one of 'deny', 'warn', 'audit'"},
		{[]string{"--set", "image.digest=sha256:abc"}, "at '/image/digest': 'sha256:abc' does not match pattern"},
		{[]string{"--set", "image.digest=sha256:abc", "--skip-schema-validation"}, `image.digest: "sha256:abc" is not a digest`},
		{[]string{"--set", "webhook.timeoutSeconds=30"}, "at '/webhook/timeoutSeconds': maximum: got 30, want 10"},
		{[]string{"--set", "webhook.timeoutSeconds=30", "--skip-schema-validation"}, "webhook.timeoutSeconds: 30 is outside 1-10"},
		{[]string{"--set", "webhook.shutdownDelaySeconds=600"}, "at '/webhook/shutdownDelaySeconds': maximum: got 600, want 120"},
		{[]string{"--set", "webhook.shutdownDelaySeconds=600", "--skip-schema-validation"}, "webhook.shutdownDelaySeconds: 600 is outside 0-120"},
		{[]string{"--set", "webhook.shutdownDelaySeconds=15s", "--skip-schema-validation"}, "webhook.shutdownDelaySeconds: 15s is not a whole number of seconds"},
		{[]string{"--set", "extraArgs={--shutdown-delay=60s}"}, `extraArgs: "--shutdown-delay=60s" would override the --shutdown-delay the chart sets`},
		{[]string{"--set", "securityContext.runAsUser=0"}, "runAsUser 0 is root"},
		{[]string{"--set", "podSecurityContext.runAsNonRoot=false"}, "runAsNonRoot false would let the webhook run as root"},
		{[]string{"--set", "securityContext.privileged=true"}, "securityContext.privileged: true"},
		{[]string{"--set", "securityContext.allowPrivilegeEscalation=true"}, "securityContext.allowPrivilegeEscalation: true"},
		{[]string{"--set", "extraArgs={serve}"}, "at '/extraArgs/0': 'serve' does not match pattern"},
		{[]string{"--set", "imagePullSecrets[0].nam=x"}, "at '/imagePullSecrets/0': missing property 'name'"},
		{[]string{"--set", "image.tag="}, "at '/image/tag': minLength: got 0, want 1"},
		{[]string{"--set", "certificate.source=vault"}, "at '/certificate/source': value must be one of 'managed', 'certManager', 'existingSecret', 'selfSigned'"},
		{[]string{"--set", "certificate.source=vault", "--skip-schema-validation"}, `certificate.source: "vault" is not a certificate source; use managed (the default), certManager or existingSecret`},
		// The removed selfSigned source: refused, naming what replaces it.
		{[]string{"--set", "certificate.source=selfSigned"}, "certificate.source: selfSigned was removed: it generated a new CA at every render"},
		{[]string{"--set", "certificate.source=selfSigned"}, "Drop certificate.source: managed, the default"},
		{[]string{"--set", "certificate.selfSigned.caCert=x"}, "certificate.selfSigned.caCert, tlsCert and tlsKey were removed with the selfSigned source. To keep that certificate: certificate.source=existingSecret"},
		{[]string{"--set", "certificate.existingSecret=mine"}, "certificate.existingSecret and certificate.caBundle are for certificate.source=existingSecret, not managed"},
		{[]string{"--set", "certificate.source=certManager", "--set", "certificate.caBundle=x"}, "are for certificate.source=existingSecret, not certManager"},
		{[]string{"--set", "certificate.source=existingSecret"}, "certificate.source=existingSecret needs certificate.existingSecret"},
		{[]string{"--set", "certificate.source=existingSecret", "--set", "certificate.existingSecret=mine"}, "certificate.source=existingSecret needs certificate.caBundle"},
		{[]string{"--set", "certificate.source=existingSecret", "--set", "certificate.existingSecret=mine", "--set-string", "certificate.caBundle=-----BEGIN CERTIFICATE-----\n-----BEGIN EC PRIVATE KEY-----"}, "certificate.caBundle holds a private key"},
		{[]string{"--set", "certificate.source=existingSecret", "--set", "certificate.existingSecret=clusterip-policy-webhook-ca"}, "clusterip-policy-webhook-ca is the managed source's CA Secret"},
		{[]string{"--set", "certificate.certManager.issuerRef.name=corp"}, "certificate.certManager.issuerRef is for certificate.source=certManager, not managed"},
		{[]string{"--set", "certificate.source=certManager", "--set", "certificate.certManager.issuerRef.name=corp"}, "needs a name and kind Issuer or ClusterIssuer"},
		{[]string{"--set", "certificate.certManager.issuerRef.nam=corp"}, "additional properties 'nam' not allowed"},
		{[]string{"--set", "certificate.managed.validity=90d"}, "at '/certificate/managed/validity': '90d' does not match pattern"},
		{[]string{"--set", "policySource=configmap"}, "at '/policySource': value must be one of 'crd', 'file'"},
		{[]string{"--set", "policySource=configmap", "--skip-schema-validation"}, `policySource: "configmap" is neither crd`},
		{[]string{"--set", "policy=apiVersion: v1"}, `policy: apiVersion "v1" is not the ClusterIPPolicy object's clusterip-policy.io/v1alpha1`},
		{[]string{"--set", "policy=apiVersion: clusterip-policy/v1alpha1"}, `policy: apiVersion clusterip-policy/v1alpha1 is the retired policy file format; give the ClusterIPPolicy object instead`},
		{[]string{"--set-string", "policy=- a list"}, "policy: not a YAML mapping"},
		{[]string{"--set", "policy=apiVersion: clusterip-policy.io/v1alpha1\nmetadata: {name: extra}"}, `policy: metadata.name "extra": the webhook reads exactly one ClusterIPPolicy, named default`},
		// webhook.namespaceSelector: kube-system and default stay covered,
		// by label too; helm template knows only their name label.
		{[]string{"--set-json", `webhook.namespaceSelector={"matchLabels":{"team":"net"}}`}, `webhook.namespaceSelector: does not select namespace kube-system (labels {"kubernetes.io/metadata.name":"kube-system"}, its name label only: helm template cannot read the cluster), which must stay covered (kube-dns and the kubernetes Service live in kube-system and default); exclude by a label those namespaces do not carry, such as {key: clusterip-policy.io/excluded, operator: DoesNotExist}`},
		{[]string{"--set-json", `webhook.namespaceSelector={"matchExpressions":[{"key":"kubernetes.io/metadata.name","operator":"NotIn","values":["default"]}]}`}, `webhook.namespaceSelector: does not select namespace default (labels {"kubernetes.io/metadata.name":"default"}`},
		{[]string{"--set-json", `webhook.namespaceSelector={"matchExpressions":[{"key":"kubernetes.io/metadata.name","operator":"In","values":["team-a"]}]}`}, `webhook.namespaceSelector: does not select namespace kube-system`},
		{[]string{"--set-json", `webhook.namespaceSelector={"matchExpressions":[{"key":"tier","operator":"In"}]}`}, `webhook.namespaceSelector.matchExpressions[0]: operator In on key "tier" needs values; the apiserver refuses it without`},
		{[]string{"--set-json", `webhook.namespaceSelector={"matchExpressions":[{"key":"tier","operator":"Exists","values":["a"]}]}`}, `webhook.namespaceSelector.matchExpressions[0]: operator Exists on key "tier" takes no values; drop them, or use In or NotIn`},
		{[]string{"--set-json", `webhook.namespaceSelector={"matchExpressions":[{"key":"tier","operator":"Near"}]}`}, "at '/webhook/namespaceSelector/matchExpressions/0/operator': value must be one of 'In', 'NotIn', 'Exists', 'DoesNotExist'"},
		{[]string{"--set-json", `webhook.namespaceSelector={"namespaces":["a"]}`}, "additional properties 'namespaces' not allowed"},
		// Ports and hostNetwork: each refusal names the value and the fix.
		{[]string{"--set", "hostNetwork=true", "--set", "ports.webhook=10250"}, "ports.webhook: 10250 is the kubelet's port on every node; with hostNetwork the pods would share the node's ports and could never bind it. Choose a port free on the nodes (for example 9443, 8081, 8080 by default), or drop hostNetwork: GKE private clusters can use ports.webhook=10250 without it (docs/providers/gke.md)"},
		{[]string{"--set", "hostNetwork=true", "--set", "ports.metrics=10249"}, "ports.metrics: 10249 is kube-proxy's metrics port on every node"},
		{[]string{"--set", "hostNetwork=true", "--set", "ports.health=10248"}, "ports.health: 10248 is the kubelet's healthz port on every node"},
		{[]string{"--set", "hostNetwork=true", "--set", "ports.webhook=443"}, "ports.webhook: 443 is below 1024; with hostNetwork the pods bind the node's ports, and the webhook runs as a non-root user without NET_BIND_SERVICE. Choose a port of 1024 or more and open it to the control plane"},
		{[]string{"--set", "ports.health=9443"}, "ports.health: 9443 is ports.webhook's too; give each of ports.webhook, ports.health and ports.metrics its own port"},
		{[]string{"--set", "ports.metrics=9443"}, "ports.metrics: 9443 is ports.webhook's too"},
		{[]string{"--set", "ports.metrics=8081"}, "ports.metrics: 8081 is ports.health's too"},
		{[]string{"--set", "ports.webhook=70000"}, "at '/ports/webhook': maximum: got 70,000, want 65,535"},
		{[]string{"--set", "ports.webhook=70000", "--skip-schema-validation"}, "ports.webhook: 70000 is outside 1-65535"},
		{[]string{"--set", "ports.webhok=9444"}, "additional properties 'webhok' not allowed"},
		{[]string{"--set", "dnsPolicy=ClusterFirstWithHostNet"}, "dnsPolicy: ClusterFirstWithHostNet is for hostNetwork pods; leave dnsPolicy empty, or set hostNetwork: true"},
		{[]string{"--set", "dnsPolicy=Cluster"}, "at '/dnsPolicy': value must be one of"},
		{[]string{"--set", "extraArgs={--port=9444}"}, `extraArgs: "--port=9444" would override the --port the chart sets with the containerPorts and the Service; set ports.webhook instead`},
		{[]string{"--set", "extraArgs={--metrics-bind-address=:9090}"}, `extraArgs: "--metrics-bind-address=:9090" would override the --metrics-bind-address the chart sets with the containerPorts and the Service; set ports.metrics instead`},
		// --namespace is given once more; the last one counts.
		{[]string{"--namespace", "default"}, `release namespace "default": the webhook's own namespace is excluded`},
		{[]string{"--namespace", "kube-system"}, `release namespace "kube-system"`},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			_, err := helmTemplate(t, c.args...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("helm template %s: got %v, want an error with %q", strings.Join(c.args, " "), err, c.want)
			}
		})
	}
}

// The values other charts have (the anchors' names) reach the objects, and
// the result is still safe.
func TestChartConventionalValues(t *testing.T) {
	r := renderChart(t,
		"--set", "global.imageRegistry=mirror.example", "--set", "global.imagePullSecrets[0].name=global-pull",
		"--set", "image.digest=sha256:"+strings.Repeat("ab", 32),
		"--set", "imagePullSecrets[0].name=my-pull",
		"--set", "priorityClassName=webhooks",
		"--set", "nodeSelector.pool=system",
		"--set", "tolerations[0].key=dedicated", "--set", "tolerations[0].operator=Exists",
		"--set", "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=pool",
		"--set", "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
		"--set", "topologySpreadConstraints[0].maxSkew=2", "--set", "topologySpreadConstraints[0].topologyKey=kubernetes.io/hostname",
		"--set", "topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway",
		"--set", "podAnnotations.team=net", "--set", "podLabels.team=net", "--set", "podLabels.app\\.kubernetes\\.io/name=hijack",
		"--set", "extraArgs={--max-view-staleness=1m}", "--set", "extraEnv[0].name=GODEBUG", "--set", "extraEnv[0].value=x509sha1=0",
		"--set", "webhook.timeoutSeconds=3", "--set", "webhook.configurationAnnotations.team=net", "--set", "webhook.shutdownDelaySeconds=40",
		"--set", "dns.clusterIP=10.43.0.10", "--set", "enforcement=deny")
	o := r.objects
	d := o.Deployments[0]
	pod := d.Spec.Template.Spec
	ctr := pod.Containers[0]
	if want := "mirror.example/clusterip-policy:dev@sha256:" + strings.Repeat("ab", 32); ctr.Image != want {
		t.Errorf("image %s, want %s (global registry, the digest pinning the tag)", ctr.Image, want)
	}
	if len(pod.ImagePullSecrets) != 1 || pod.ImagePullSecrets[0].Name != "my-pull" {
		t.Errorf("imagePullSecrets %v, want the chart's own my-pull over the global one", pod.ImagePullSecrets)
	}
	if pod.PriorityClassName != "webhooks" || pod.NodeSelector["pool"] != "system" || pod.NodeSelector["kubernetes.io/os"] != "linux" {
		t.Errorf("priorityClassName %q, nodeSelector %v", pod.PriorityClassName, pod.NodeSelector)
	}
	if len(pod.Tolerations) != 1 || pod.Tolerations[0].Key != "dedicated" || pod.Affinity == nil || pod.Affinity.NodeAffinity == nil {
		t.Errorf("tolerations %v, affinity %v", pod.Tolerations, pod.Affinity)
	}
	if len(pod.TopologySpreadConstraints) != 1 || pod.TopologySpreadConstraints[0].MaxSkew != 2 {
		t.Errorf("topologySpreadConstraints %v, want the one given instead of the base's two", pod.TopologySpreadConstraints)
	}
	if l := d.Spec.Template.Labels; l["team"] != "net" || l["app.kubernetes.io/name"] != "clusterip-policy-webhook" || d.Spec.Template.Annotations["team"] != "net" {
		t.Errorf("pod labels %v (the selector's label must win over podLabels), annotations %v", l, d.Spec.Template.Annotations)
	}
	// The grace period follows the delay: 40 s, then a 3 s review, then 10 s.
	if v, _ := flagValue(&ctr, "shutdown-delay"); v != "40s" || pod.TerminationGracePeriodSeconds == nil || *pod.TerminationGracePeriodSeconds != 53 {
		t.Errorf("--shutdown-delay=%s, terminationGracePeriodSeconds %v; want 40s and 53", v, pod.TerminationGracePeriodSeconds)
	}
	if v, ok := flagValue(&ctr, "max-view-staleness"); !ok || v != "1m" {
		t.Errorf("extraArgs did not reach the container: %v", ctr.Args)
	}
	var env bool
	for _, e := range ctr.Env {
		env = env || (e.Name == "GODEBUG" && e.Value == "x509sha1=0")
	}
	if !env {
		t.Errorf("extraEnv did not reach the container: %v", ctr.Env)
	}
	for _, w := range o.webhooks() {
		if w.timeoutSeconds == nil || *w.timeoutSeconds != 3 {
			t.Errorf("%s: timeoutSeconds %v, want 3", w.where, w.timeoutSeconds)
		}
	}
	for _, c := range o.Mutating {
		if c.Annotations["team"] != "net" || c.Annotations["admissions.enforcer/disabled"] != "true" {
			t.Errorf("MutatingWebhookConfiguration annotations %v", c.Annotations)
		}
	}
	for _, c := range o.Validating {
		if c.Annotations["team"] != "net" || c.Annotations["admissions.enforcer/disabled"] != "true" {
			t.Errorf("ValidatingWebhookConfiguration annotations %v", c.Annotations)
		}
	}
	if len(o.Policies) != 1 {
		t.Fatalf("%d policy objects", len(o.Policies))
	}
	var spec struct {
		ServiceCIDRs []string `json:"serviceCIDRs"`
		Reservations []struct {
			IP, Service string
		} `json:"reservations"`
		Enforcement struct{ Default string } `json:"enforcement"`
	}
	if err := json.Unmarshal(o.Policies[0].Spec, &spec); err != nil {
		t.Fatal(err)
	}
	if len(spec.ServiceCIDRs) != 0 || len(spec.Reservations) != 1 || spec.Reservations[0].IP != "10.43.0.10" || spec.Reservations[0].Service != "kube-system/kube-dns" || spec.Enforcement.Default != "deny" {
		t.Errorf("the policy written from values: %+v, want only 10.43.0.10 for kube-system/kube-dns, deny, and no serviceCIDRs", spec)
	}
	for _, check := range []check{replicasAtLeastTwo, webhookNamespaces, noRoot, policyParses} {
		for _, p := range check(o) {
			t.Error(p)
		}
	}

	// Without values: warn on a first install, the DNS address as given,
	// the base's spread, and a global registry alone prefixes the image.
	def := renderChart(t).objects
	if err := json.Unmarshal(def.Policies[0].Spec, &spec); err != nil {
		t.Fatal(err)
	}
	if spec.Enforcement.Default != "warn" || len(spec.Reservations) != 1 || spec.Reservations[0].IP != "10.96.0.10" {
		t.Errorf("the default policy: %+v, want warn and the DNS address given", spec)
	}
	if n := len(def.Deployments[0].Spec.Template.Spec.TopologySpreadConstraints); n != 2 {
		t.Errorf("%d topologySpreadConstraints by default, want the base's 2", n)
	}
	noDNS := renderChart(t, "--set", "dns.clusterIP=", "--set", "dns.reserve=false").objects
	spec.Reservations = nil
	if err := json.Unmarshal(noDNS.Policies[0].Spec, &spec); err != nil {
		t.Fatal(err)
	}
	if len(spec.Reservations) != 0 {
		t.Errorf("dns.reserve=false still reserves %+v", spec.Reservations)
	}
}

// Values the operator sets reach the objects, and the result is still safe.
func TestChartValues(t *testing.T) {
	r := renderChart(t, "--set", "replicas=5", "--set", "image.repository=registry.example/cip", "--set", "image.tag=v1.2.3",
		"--set", "webhook.failurePolicy=Ignore", "--set", "webhook.armFailurePolicy=false", "--set", "webhook.excludedNamespaces={ci,sandbox}",
		"--set", "resources.limits.memory=512Mi", "--set", "webhook.holdReservations=false", "--set", "webhook.manageMatchConditions=false",
		"--set", "webhook.leaderElection.leaseDuration=30s", "--set", "webhook.leaderElection.renewDeadline=20s", "--set", "webhook.leaderElection.retryPeriod=4s",
		"--set", "webhook.backstop=false")
	o := r.objects
	d := o.Deployments[0]
	if *d.Spec.Replicas != 5 {
		t.Errorf("replicas %d, want 5", *d.Spec.Replicas)
	}
	ctr := d.Spec.Template.Spec.Containers[0]
	if ctr.Image != "registry.example/cip:v1.2.3" {
		t.Errorf("image %s", ctr.Image)
	}
	if got := ctr.Resources.Limits.Memory().String(); got != "512Mi" {
		t.Errorf("memory limit %s, want 512Mi", got)
	}
	if _, ok := flagValue(&ctr, "hold-reservations"); ok || strings.Contains(strings.Join(ctr.Args, " "), "--hold-reservations") {
		t.Error("--hold-reservations is still passed with webhook.holdReservations=false")
	}
	if strings.Contains(strings.Join(ctr.Args, " "), "--manage-match-conditions") {
		t.Error("--manage-match-conditions is still passed with webhook.manageMatchConditions=false")
	}
	if strings.Contains(strings.Join(ctr.Args, " "), "--backstop") {
		t.Error("--backstop is still passed with webhook.backstop=false")
	}
	for flag, want := range map[string]string{"leader-election-lease-duration": "30s", "leader-election-renew-deadline": "20s", "leader-election-retry-period": "4s"} {
		if got, _ := flagValue(&ctr, flag); got != want {
			t.Errorf("--%s=%q, want %q from webhook.leaderElection", flag, got, want)
		}
	}
	for _, w := range o.webhooks() {
		if w.failurePolicy == nil || *w.failurePolicy != "Ignore" {
			t.Errorf("%s: failurePolicy %v, want Ignore", w.where, w.failurePolicy)
		}
		if clusterScoped(w) {
			continue
		}
		want := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{ownNamespace, "ci", "sandbox"},
		}}}
		if !reflect.DeepEqual(w.namespaceSelector, want) {
			t.Errorf("%s: namespaceSelector %+v", w.where, w.namespaceSelector)
		}
	}
	for _, check := range []check{replicasAtLeastTwo, webhookNamespaces, noRoot, policyParses} {
		for _, p := range check(o) {
			t.Error(p)
		}
	}
}

// webhook.namespaceSelector is merged with the names: one NotIn on the
// name label (the release namespace and webhook.excludedNamespaces), then
// the labels, on both Service webhooks and only on them; a selector that
// keeps kube-system and default (a label they do not carry, a name list
// without them) is accepted.
func TestChartNamespaceSelector(t *testing.T) {
	r := renderChart(t, "--set", "webhook.excludedNamespaces={ci}",
		"--set-json", `webhook.namespaceSelector={"matchExpressions":[{"key":"clusterip-policy.io/excluded","operator":"DoesNotExist"},{"key":"kubernetes.io/metadata.name","operator":"NotIn","values":["sandbox"]}]}`)
	want := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{ownNamespace, "ci"}},
		{Key: "clusterip-policy.io/excluded", Operator: metav1.LabelSelectorOpDoesNotExist},
		{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"sandbox"}},
	}}
	n := 0
	for _, w := range r.objects.webhooks() {
		if clusterScoped(w) {
			if w.namespaceSelector != nil {
				t.Errorf("%s: a cluster-scoped webhook got namespaceSelector %+v", w.where, w.namespaceSelector)
			}
			continue
		}
		n++
		if !reflect.DeepEqual(w.namespaceSelector, want) {
			t.Errorf("%s: namespaceSelector %+v, want %+v", w.where, w.namespaceSelector, want)
		}
	}
	if n != 2 {
		t.Errorf("%d Service webhooks, want 2", n)
	}
	for _, check := range []check{webhookNamespaces} {
		for _, p := range check(r.objects) {
			t.Error(p)
		}
	}
	// matchLabels that kube-system and default would need to carry are
	// refused by TestChartRefusesUnsafeValues; an In that names them is not.
	r = renderChart(t, "--set-json", `webhook.namespaceSelector={"matchExpressions":[{"key":"kubernetes.io/metadata.name","operator":"In","values":["kube-system","default","team-a"]}]}`)
	for _, w := range r.objects.webhooks() {
		if !clusterScoped(w) && (w.namespaceSelector == nil || len(w.namespaceSelector.MatchExpressions) != 2 || w.namespaceSelector.MatchExpressions[1].Operator != metav1.LabelSelectorOpIn) {
			t.Errorf("%s: namespaceSelector %+v, want the name NotIn and the In", w.where, w.namespaceSelector)
		}
	}
}

// ports.* reach the flags, the containerPorts and the Service's
// targetPort; hostNetwork brings dnsPolicy ClusterFirstWithHostNet unless
// dnsPolicy is given; ports.webhook=10250 without hostNetwork (GKE private
// clusters) is accepted.
func TestChartPortsAndHostNetwork(t *testing.T) {
	for _, c := range []struct {
		name                     string
		args                     []string
		webhook, health, metrics int32
		hostNetwork              bool
		dnsPolicy                corev1.DNSPolicy
	}{
		{"defaults", nil, 9443, 8081, 8080, false, ""},
		{"GKE private: 10250 in the pod's network", []string{"--set", "ports.webhook=10250"}, 10250, 8081, 8080, false, ""},
		{"hostNetwork on free ports", []string{"--set", "hostNetwork=true", "--set", "ports.webhook=10443", "--set", "ports.health=10444", "--set", "ports.metrics=10445"}, 10443, 10444, 10445, true, corev1.DNSClusterFirstWithHostNet},
		{"hostNetwork with dnsPolicy given", []string{"--set", "hostNetwork=true", "--set", "dnsPolicy=Default"}, 9443, 8081, 8080, true, corev1.DNSDefault},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := renderChart(t, c.args...).objects
			spec := o.Deployments[0].Spec.Template.Spec
			ctr := spec.Containers[0]
			for flag, want := range map[string]string{"port": fmt.Sprint(c.webhook), "health-probe-bind-address": fmt.Sprintf(":%d", c.health), "metrics-bind-address": fmt.Sprintf(":%d", c.metrics)} {
				if got, _ := flagValue(&ctr, flag); got != want {
					t.Errorf("--%s=%q, want %q", flag, got, want)
				}
			}
			got := map[string]int32{}
			for _, p := range ctr.Ports {
				got[p.Name] = p.ContainerPort
			}
			if want := map[string]int32{"webhook": c.webhook, "health": c.health, "metrics": c.metrics}; !reflect.DeepEqual(got, want) {
				t.Errorf("containerPorts %v, want %v", got, want)
			}
			svc := o.Services[0]
			if tp := svc.Spec.Ports[0].TargetPort.IntValue(); svc.Spec.Ports[0].Port != 443 || tp != int(c.webhook) {
				t.Errorf("Service port %d -> targetPort %d, want 443 -> %d", svc.Spec.Ports[0].Port, tp, c.webhook)
			}
			if spec.HostNetwork != c.hostNetwork || spec.DNSPolicy != c.dnsPolicy {
				t.Errorf("hostNetwork %v dnsPolicy %q, want %v %q", spec.HostNetwork, spec.DNSPolicy, c.hostNetwork, c.dnsPolicy)
			}
			for _, sc := range safetyChecks {
				for _, p := range sc.check(o) {
					t.Errorf("%s: %s", sc.name, p)
				}
			}
		})
	}
}

// The chart installs the policy CRD from its crds/ directory (helm's way:
// installed before the templates, never upgraded or deleted by helm); it
// must be the base's CRD byte for byte.
func TestChartCarriesTheBaseCRD(t *testing.T) {
	base, err := os.ReadFile("base/crd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	chart, err := os.ReadFile("../charts/clusterip-policy/crds/clusterippolicies.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if string(base) != string(chart) {
		t.Error("charts/clusterip-policy/crds/clusterippolicies.yaml differs from manifests/base/crd.yaml; both are generated: run make generate")
	}
}

// helm lint passes with the default values and with every new value set
// (--strict: a template warning fails too).
func TestChartLints(t *testing.T) {
	for _, args := range [][]string{
		nil,
		{"--set", "monitoring.podMonitor.enabled=true", "--set", "monitoring.prometheusRule.enabled=true", "--set", "monitoring.dashboard.enabled=true",
			"--set", "image.registry=ghcr.io", "--set", "image.digest=sha256:" + strings.Repeat("0f", 32), "--set", "imagePullSecrets[0].name=pull",
			"--set", "tolerations[0].operator=Exists", "--set", "podLabels.team=net", "--set", "podAnnotations.team=net",
			"--set", "extraArgs={--max-view-staleness=1m}", "--set", "extraEnv[0].name=X", "--set", "webhook.timeoutSeconds=2",
			"--set", "enforcement=deny", "--set", "global.imageRegistry=mirror.example"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cmd := exec.CommandContext(ctx, helmBinary(t), append(append([]string{"lint", "--strict", chartDir, "--namespace", ownNamespace}, chartRequiredArgs...), args...)...)
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Errorf("helm lint %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// commonLabels reach every rendered object and every pod template (the
// hooks' too); a key of the chart's own is refused naming it.
func TestChartCommonLabelsReachEveryObjectAndPod(t *testing.T) {
	r := renderChart(t, "--set", "commonLabels.team=net", "--set", "commonLabels.cost-center=a1",
		"--set", "unregisterOnUninstall=true", "--set", "monitoring.podMonitor.enabled=true")
	for _, m := range r.all {
		md, _ := m["metadata"].(map[string]any)
		labels, _ := md["labels"].(map[string]any)
		if labels["team"] != "net" || labels["cost-center"] != "a1" {
			t.Errorf("%v %v lacks the commonLabels: %v", m["kind"], md["name"], labels)
		}
		spec, _ := m["spec"].(map[string]any)
		if tpl, ok := spec["template"].(map[string]any); ok {
			tmd, _ := tpl["metadata"].(map[string]any)
			tl, _ := tmd["labels"].(map[string]any)
			if tl["team"] != "net" {
				t.Errorf("%v %v: its pods lack the commonLabels: %v", m["kind"], md["name"], tl)
			}
		}
	}
	for _, key := range []string{"app.kubernetes.io/name", "helm.sh/chart"} {
		_, err := helmTemplate(t, "--set", "commonLabels."+strings.ReplaceAll(key, ".", `\.`)+"=x")
		if err == nil || !strings.Contains(err.Error(), "commonLabels."+key+": the chart sets this label itself") {
			t.Errorf("commonLabels.%s: %v, want the refusal naming it", key, err)
		}
	}
}

// createPolicyObject=false: the release renders no ClusterIPPolicy (the
// network team applies it apart) and so needs no dns.clusterIP; the pods
// still read the object (--policy-source=crd).
func TestChartLeavesThePolicyObjectToItsOwner(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, helmBinary(t), "template", "clusterip-policy", chartDir, "--namespace", ownNamespace,
		"--kube-version", "1.37.0", "--set", "createPolicyObject=false").CombinedOutput()
	if err != nil {
		t.Fatalf("helm template without dns.clusterIP and createPolicyObject=false: %v\n%s", err, out)
	}
	docs, err := SplitYAML(out)
	if err != nil {
		t.Fatal(err)
	}
	o := &objects{}
	for _, d := range docs {
		if err := o.decode(d); err != nil {
			t.Fatal(err)
		}
	}
	if len(o.Policies) != 0 {
		t.Errorf("rendered %d ClusterIPPolicy objects, want none", len(o.Policies))
	}
	if v, ok := flagValue(&o.Deployments[0].Spec.Template.Spec.Containers[0], "policy-source"); !ok || v != "crd" {
		t.Errorf("--policy-source=%q, want crd: the pods read the object applied apart", v)
	}
}

//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"clusterip-policy/manifests"
	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// TestHelmRefusesHostNetworkInARestrictedNamespace: Pod Security baseline
// and restricted forbid host networking, so docs/providers/eks.md's
// hostNetwork install into a namespace labelled as the README labels it
// would leave the ReplicaSet creating no pod, silently. The chart reads the
// release namespace's enforce label (lookup, which only a render against the
// cluster does: helm install, upgrade, template --dry-run=server) and
// refuses, naming the value, the label and both fixes; a namespace labelled
// privileged, or not labelled (privileged by default), renders. The
// apiserver itself refuses such a pod in the restricted namespace, so the
// refusal is the apiserver's rule, read ahead of time. Only etcd and a
// kube-apiserver: no kubelet runs the pods.
func TestHelmRefusesHostNetworkInARestrictedNamespace(t *testing.T) {
	root, helm := repoAndHelm(t)
	c := own(t, framework.Options{NoRBAC: true, NoRegister: true})
	cs := c.Client(0)
	ctx := testContext(t, 2*time.Minute)
	runHelm := helmRunner{bin: helm, root: root, dir: t.TempDir(), kubeconfig: c.AdminKubeconfig}.run
	// docs/providers/eks.md's values for a custom CNI.
	eks := []string{"--set", "hostNetwork=true", "--set", "ports.webhook=10443", "--set", "ports.health=10444", "--set", "ports.metrics=10445"}

	for _, tc := range []struct {
		ns, level string
		refused   bool
	}{
		{"cip-psa-restricted", "restricted", true},
		{"cip-psa-baseline", "baseline", true},
		{"cip-psa-privileged", "privileged", false},
		{"cip-psa-unlabelled", "", false},
	} {
		t.Run("enforce="+tc.level, func(t *testing.T) {
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tc.ns}}
			if tc.level != "" {
				ns.Labels = map[string]string{"pod-security.kubernetes.io/enforce": tc.level}
			}
			if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			// template --dry-run=server: the render of helm install, lookups
			// included, without installing (no kubelet here runs the pods).
			args := append([]string{"template", "clusterip-policy", "charts/clusterip-policy", "--namespace", tc.ns, "--dry-run=server",
				"--kube-version", "1.37.2", "--set", "dns.clusterIP=10.96.0.10"}, eks...)
			out, err := runHelm(ctx, args...)
			if !tc.refused {
				if err != nil || !strings.Contains(out, "hostNetwork: true") {
					t.Errorf("hostNetwork in a namespace enforcing %q: %v, want the render with hostNetwork: true", tc.level, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("hostNetwork in a namespace enforcing %s rendered; want the chart to refuse it", tc.level)
			}
			t.Logf("e2e: helm: hostNetwork into a namespace enforcing %s refused: %s", tc.level, firstLine(err.Error(), "execution error"))
			for _, want := range []string{"hostNetwork: true", "pod-security.kubernetes.io/enforce=" + tc.level,
				"kubectl label namespace " + tc.ns + " pod-security.kubernetes.io/enforce=privileged --overwrite", "drop hostNetwork", "docs/providers/eks.md"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the refusal does not say %q:\n%v", want, err)
				}
			}
			// Without hostNetwork, the default install, the same namespace renders.
			if _, err := runHelm(ctx, "template", "clusterip-policy", "charts/clusterip-policy", "--namespace", tc.ns, "--dry-run=server",
				"--kube-version", "1.37.2", "--set", "dns.clusterIP=10.96.0.10"); err != nil {
				t.Errorf("the default values in a namespace enforcing %s: %v", tc.level, err)
			}
			// What the chart reads ahead of time is the apiserver's rule: a
			// pod as the chart's, with hostNetwork, is refused there. (The
			// ServiceAccount admission wants the default ServiceAccount,
			// which no controller-manager makes here.)
			if _, err := cs.CoreV1().ServiceAccounts(tc.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "host-network"}, Spec: corev1.PodSpec{
				HostNetwork:     true,
				SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptrTo(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
				Containers: []corev1.Container{{Name: "webhook", Image: "clusterip-policy:dev", Ports: []corev1.ContainerPort{{ContainerPort: 10443}},
					SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptrTo(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}},
			}}
			_, err = cs.CoreV1().Pods(tc.ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err == nil || !strings.Contains(err.Error(), "host namespaces") {
				t.Errorf("a hostNetwork pod in the namespace enforcing %s: %v, want the apiserver's Pod Security refusal (host namespaces)", tc.level, err)
			}
		})
	}
}

// TestCriticalPodsQuotaAdmitsTheChartsPods: an apiserver whose
// ResourceQuota admission limits the critical priority classes as GKE's
// does (framework.ProviderAdmissionConfiguration, the real node's) refuses
// the chart's pods, the Deployment's and the hook Jobs', in a namespace
// without a quota scoped to their class, and admits them, in a namespace
// enforcing Pod Security restricted as the README labels it, once the
// chart's criticalPodsQuota is there. Server-side dry-run creates of the
// pods the rendered templates describe: no controller-manager or kubelet
// here, so the quota's usage is never counted (the real node's install
// counts it); what this shows is that its scopeSelector covers the class.
func TestCriticalPodsQuotaAdmitsTheChartsPods(t *testing.T) {
	root, helm := repoAndHelm(t)
	dir := t.TempDir()
	admissionConfig := filepath.Join(dir, "admission-config.yaml")
	if err := os.WriteFile(admissionConfig, []byte(framework.ProviderAdmissionConfiguration), 0o644); err != nil {
		t.Fatal(err)
	}
	c := own(t, framework.Options{NoRBAC: true, NoRegister: true, APIServers: []framework.APIServerOptions{{
		ServiceClusterIPRange: "10.96.0.0/16", ExtraArgs: []string{"--admission-control-config-file=" + admissionConfig}}}})
	cs := c.Client(0)
	ctx := testContext(t, 2*time.Minute)
	runHelm := helmRunner{bin: helm, root: root, dir: dir, kubeconfig: c.AdminKubeconfig}.run
	const ns = "clusterip-policy"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The whole release as helm upgrade renders it (lookup reads this
	// cluster, so the pre-delete hook is there too): its pods, and the
	// ServiceAccounts they run as (the ServiceAccount admission wants them).
	out, err := runHelm(ctx, "template", "clusterip-policy", "charts/clusterip-policy", "--namespace", ns, "--dry-run=server", "--is-upgrade",
		"--kube-version", "1.37.2", "--set", "dns.clusterIP=10.96.0.10")
	if err != nil {
		t.Fatal(err)
	}
	docs, err := manifests.SplitYAML([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	pods := map[string]*corev1.Pod{}
	var quotas []string
	for _, d := range docs {
		var m struct {
			Kind     string
			Metadata struct{ Name string }
		}
		if err := yaml.Unmarshal(d, &m); err != nil {
			t.Fatal(err)
		}
		var tpl *corev1.PodTemplateSpec
		switch m.Kind {
		case "Deployment":
			var o appsv1.Deployment
			if err := yaml.Unmarshal(d, &o); err != nil {
				t.Fatal(err)
			}
			tpl = &o.Spec.Template
		case "Job":
			var o batchv1.Job
			if err := yaml.Unmarshal(d, &o); err != nil {
				t.Fatal(err)
			}
			tpl = &o.Spec.Template
		case "ResourceQuota":
			quotas = append(quotas, string(d))
		}
		if tpl == nil {
			continue
		}
		pods[m.Kind+"/"+m.Metadata.Name] = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: m.Metadata.Name, Labels: tpl.Labels}, Spec: tpl.Spec}
		// Two pods may share one (a hook of another event, say).
		if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: tpl.Spec.ServiceAccountName}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"Deployment/clusterip-policy-webhook", "Job/clusterip-policy-apply-crd", "Job/clusterip-policy-unregister"} {
		if pods[want] == nil {
			t.Fatalf("helm template --is-upgrade --dry-run=server renders no %s; it renders %d pod templates", want, len(pods))
		}
	}
	if len(quotas) == 0 {
		t.Fatal("the chart renders no ResourceQuota with the default priorityClassName")
	}
	critical := func(p *corev1.Pod) bool {
		return p.Spec.PriorityClassName == "system-cluster-critical" || p.Spec.PriorityClassName == "system-node-critical"
	}
	create := func(p *corev1.Pod) error {
		_, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}

	// Without the chart's quota: every critical pod refused.
	for name, p := range pods {
		err := create(p)
		switch {
		case critical(p) && (err == nil || !strings.Contains(err.Error(), "insufficient quota to match these scopes")):
			t.Errorf("%s (priorityClassName %s) without the chart's quota: %v, want the ResourceQuota admission's refusal", name, p.Spec.PriorityClassName, err)
		case !critical(p) && err != nil:
			t.Errorf("%s (priorityClassName %q, not limited): %v", name, p.Spec.PriorityClassName, err)
		}
	}
	if t.Failed() {
		return
	}

	// With it (the release's and the pre-upgrade copy, as helm upgrade
	// creates them): every pod admitted, Pod Security restricted included.
	for _, q := range quotas {
		if stdout, stderr, err := c.Kubectl(ctx, q, "apply", "-f", "-"); err != nil {
			t.Fatalf("kubectl apply the chart's ResourceQuota: %v\n%s%s", err, stdout, stderr)
		}
	}
	for name, p := range pods {
		fixtures.EventuallyNil(t, fmt.Sprintf("%s admitted beside the chart's quota", name), 30*time.Second, func() error { return create(p) })
	}
	t.Logf("e2e: helm: %d pods of the chart (priority class %s) refused without its quota, admitted with it in a restricted namespace", len(pods), pods["Deployment/clusterip-policy-webhook"].Spec.PriorityClassName)
}

// firstLine is the first line of s that contains sub (helm's error among
// its output), or s.
func firstLine(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return s
}

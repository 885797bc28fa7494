//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"clusterip-policy/internal/testutil"
	"clusterip-policy/test/e2e/framework"
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
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	helm := filepath.Join(filepath.Dir(framework.DefaultBinaries(root).Kubectl), "helm")
	if _, err := os.Stat(helm); err != nil {
		testutil.MissingTool(t, "no helm at %s (run hack/build-tools.sh): %v", helm, err)
	}
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

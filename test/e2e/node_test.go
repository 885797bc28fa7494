//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"clusterip-policy/pkg/matchconditions"
	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// realNode is a node `make node-up` started (hack/node-up.sh): its
// .local/node/env file, which NODE_ENV names, and clients for it.
type realNode struct {
	env        map[string]string
	kubeconfig string
	cs         kubernetes.Interface
	root, dir  string
	helm       string
	podCIDR    netip.Prefix
}

// nodeUnderTest reads NODE_ENV; the node scenarios skip without it (they
// run under `make node-e2e`, which brings the node up and down around them).
func nodeUnderTest(t *testing.T) *realNode {
	t.Helper()
	path := os.Getenv("NODE_ENV")
	if path == "" {
		t.Skip("no real node: run `make node-e2e` (NODE_ENV names .local/node/env of `make node-up`)")
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("NODE_ENV: %v", err)
	}
	n := &realNode{env: map[string]string{}, dir: t.TempDir()}
	for _, line := range strings.Split(string(raw), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			n.env[k] = v
		}
	}
	for _, k := range []string{"NODE_KUBECONFIG", "NODE_REGISTRY", "NODE_IMAGE", "NODE_APISERVER_HOST", "NODE_APISERVER_PORT", "NODE_POD_CIDR", "NODE_NAME"} {
		if n.env[k] == "" {
			t.Fatalf("%s has no %s: was it written by `make node-up`?", path, k)
		}
	}
	n.kubeconfig = n.env["NODE_KUBECONFIG"]
	if n.podCIDR, err = netip.ParsePrefix(n.env["NODE_POD_CIDR"]); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", n.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	n.cs = kubernetes.NewForConfigOrDie(cfg)
	if n.root, err = framework.RepoRoot(); err != nil {
		t.Fatal(err)
	}
	n.helm = filepath.Join(filepath.Dir(framework.DefaultBinaries(n.root).Kubectl), "helm")
	return n
}

// run runs a tool with the node's kubeconfig in reach and helm's state in
// the test's directory; it returns stdout, and fails the test with stderr.
func (n *realNode) run(t *testing.T, ctx context.Context, name string, args ...string) string {
	t.Helper()
	out, err := n.try(ctx, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (n *realNode) try(ctx context.Context, name string, args ...string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 6*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, name, args...)
	cmd.Dir = n.root
	cmd.Env = append(os.Environ(), "KUBECONFIG="+n.kubeconfig,
		"HELM_CACHE_HOME="+filepath.Join(n.dir, "cache"), "HELM_CONFIG_HOME="+filepath.Join(n.dir, "config"), "HELM_DATA_HOME="+filepath.Join(n.dir, "data"))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w\n%s%s", filepath.Base(name), strings.Join(args, " "), err, out.String(), errOut.String())
	}
	return strings.TrimSpace(out.String()), nil
}

// pushChart packages the chart with the image the node's registry serves
// (as `make release` does) and pushes it there; it returns the chart version.
func (n *realNode) pushChart(t *testing.T, ctx context.Context) (ref, version string) {
	t.Helper()
	image := n.env["NODE_IMAGE"] // 127.0.0.1:PORT/clusterip-policy:TAG@sha256:...
	named, digest, ok := strings.Cut(image, "@")
	i := strings.LastIndex(named, ":")
	if !ok || i < 0 {
		t.Fatalf("NODE_IMAGE %q is not repo:tag@digest", image)
	}
	repo, tag := named[:i], named[i+1:]
	pkg := n.run(t, ctx, filepath.Join(n.root, "hack", "package-chart.sh"), repo, tag, digest, filepath.Join(n.dir, "chart"))
	n.run(t, ctx, n.helm, "push", pkg, "oci://"+n.env["NODE_REGISTRY"]+"/charts", "--plain-http")
	return "oci://" + n.env["NODE_REGISTRY"] + "/charts/clusterip-policy", strings.TrimPrefix(tag, "v")
}

// apiserverEnv points the pods' in-cluster client at the apiserver's bridge
// address: without kube-proxy the kubernetes Service's ClusterIP leads
// nowhere, and the node must never send anything to a ClusterIP.
func (n *realNode) apiserverEnv() string {
	return fmt.Sprintf(`extraEnv=[{"name":"KUBERNETES_SERVICE_HOST","value":%q},{"name":"KUBERNETES_SERVICE_PORT","value":%q}]`,
		n.env["NODE_APISERVER_HOST"], n.env["NODE_APISERVER_PORT"])
}

// TestNodeChartFromRegistry installs the chart from the loopback registry
// onto the real node and shows, through the pods only: their pull, their
// securityContext as the kernel sees it, their readiness; a denial whose
// decision is in a pod's log; the reservation hold, a reserved Service given
// its address; the managed matchCondition; then helm uninstall and the
// documented clean-up leaving nothing of ours.
func TestNodeChartFromRegistry(t *testing.T) {
	n := nodeUnderTest(t)
	ctx := testContext(t, 15*time.Minute)
	chart, version := n.pushChart(t, ctx)
	const ns = "clusterip-policy"
	// Labelled restricted as the README labels it; the node's apiserver
	// admits the pods' system-cluster-critical only beside the chart's
	// quota (node_providers_test.go). The rolling update's helm upgrade runs
	// the pre-upgrade hook Job, and the uninstall the pre-delete one, there.
	if err := n.restrictedNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}

	t.Run("helm install from the registry: the pods pull the image and become ready on the node", func(t *testing.T) {
		start := time.Now()
		out := n.run(t, ctx, n.helm, "install", "clusterip-policy", chart, "--version", version, "--plain-http",
			"--namespace", ns, "--create-namespace", "--wait", "--timeout", "5m",
			"--set", "dns.clusterIP=10.96.0.10", "--set", "enforcement=deny", "--set-json", n.apiserverEnv())
		if !strings.Contains(out, "STATUS: deployed") {
			t.Fatalf("helm install did not report deployed:\n%s", out)
		}
		t.Logf("e2e: node: helm install %s --version %s --wait: 3 pods ready in %s", chart, version, time.Since(start).Round(time.Second))
		n.checkPods(t, ctx, ns, 3)
		n.checkCriticalPodsQuota(t, ctx, ns, 3)
	})
	if t.Failed() {
		n.dumpPods(t, ctx, ns)
		return
	}

	t.Run("the apiserver calls the pods through the webhook Service: a denial is in a pod's log", func(t *testing.T) {
		n.checkServiceRouting(t, ctx, ns)
		svc := fmt.Sprintf("node-probe-%d", time.Now().UnixNano()%1e6)
		_, err := n.cs.CoreV1().Services("default").Create(ctx, fixtures.Service("default", svc, fixtures.WithClusterIP("10.96.200.5")), metav1.CreateOptions{})
		requireDenied(t, err, framework.MutatingWebhookName, "10.96.200.5", "lies in the dynamic band", "static band 10.96.0.1-10.96.1.0")
		pod, line := n.decisionInPodLogs(t, ctx, ns, svc, 30*time.Second)
		if pod == "" {
			t.Fatalf("no pod of the Deployment logged a decision for default/%s: the pods are not the ones answering", svc)
		}
		t.Logf("e2e: node: pod %s logged the denial: %.200s", pod, line)
	})

	t.Run("the hold on the DNS address, then kube-dns created without an address gets it", func(t *testing.T) {
		var hold string
		fixtures.EventuallyNil(t, "the hold on 10.96.0.10 for kube-system/kube-dns", time.Minute, func() error {
			a, err := n.cs.NetworkingV1().IPAddresses().Get(ctx, "10.96.0.10", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if a.Labels["ipaddress.kubernetes.io/managed-by"] != "clusterip-policy.io" || a.Spec.ParentRef == nil || a.Spec.ParentRef.Namespace != "kube-system" || a.Spec.ParentRef.Name != "kube-dns" {
				return fmt.Errorf("IPAddress 10.96.0.10 = labels %v parentRef %+v, want the hold for kube-system/kube-dns", a.Labels, a.Spec.ParentRef)
			}
			hold = a.Name
			return nil
		})
		if hold == "" {
			return
		}
		s, err := n.cs.CoreV1().Services("kube-system").Create(ctx, fixtures.Service("kube-system", "kube-dns"), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create kube-system/kube-dns: %v", err)
		}
		if s.Spec.ClusterIP != "10.96.0.10" {
			t.Fatalf("kube-dns got %s, want its reserved 10.96.0.10", s.Spec.ClusterIP)
		}
		if pod, _ := n.decisionInPodLogs(t, ctx, ns, "kube-dns", 30*time.Second); pod == "" {
			t.Error("no pod logged the assign-reserved decision for kube-system/kube-dns")
		}
		t.Logf("e2e: node: hold on 10.96.0.10 held by a pod; kube-system/kube-dns created without an address got 10.96.0.10")
	})

	t.Run("the leader writes the managed matchCondition", func(t *testing.T) {
		fixtures.EventuallyNil(t, "the leader's managed matchCondition", time.Minute, func() error {
			m, err := n.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, w := range m.Webhooks {
				for _, mc := range w.MatchConditions {
					if w.Name == framework.MutatingWebhookName && mc.Name == matchconditions.Name && mc.Expression != "" {
						return nil
					}
				}
			}
			return fmt.Errorf("no %s matchCondition on %s yet", matchconditions.Name, framework.MutatingWebhookName)
		})
	})

	t.Run("a rolling update to a new image tag under 8 clients: no allowed create fails", func(t *testing.T) {
		n.rollingUpdate(t, ctx, ns)
	})
	t.Run("two evictions under 8 clients: the PodDisruptionBudget refuses the second, no allowed create fails", func(t *testing.T) {
		n.evictions(t, ctx, ns)
	})
	t.Run("the node's containerd restarted under 8 clients: the pods keep answering", func(t *testing.T) {
		n.restartContainerd(t, ctx, ns)
	})

	t.Run("helm uninstall, then the documented clean-up, leave nothing of ours", func(t *testing.T) {
		n.uninstall(t, ctx, ns)
	})
}

// TestNodeChartNonDefaultValues installs the chart with the values a
// platform team changes (a pull secret, a priority class, extra flags, two
// replicas, its own namespace) into a cluster with a second Service range
// (a ServiceCIDR 10.97.0.0/24 the controller-manager makes ready), and shows
// the pods enforcing on that range.
func TestNodeChartNonDefaultValues(t *testing.T) {
	n := nodeUnderTest(t)
	ctx := testContext(t, 10*time.Minute)
	chart, version := n.pushChart(t, ctx)
	const ns = "platform-admission"
	if err := n.restrictedNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	auth := fmt.Sprintf(`{"auths":{%q:{"auth":"bm9kZTpub2Rl"}}}`, n.env["NODE_REGISTRY"])
	if _, err := n.cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "registry-pull"}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(auth)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.cs.SchedulingV1().PriorityClasses().Create(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "platform-admission"}, Value: 900000}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = n.cs.SchedulingV1().PriorityClasses().Delete(context.Background(), "platform-admission", metav1.DeleteOptions{})
		_ = n.cs.NetworkingV1().ServiceCIDRs().Delete(context.Background(), "platform-second", metav1.DeleteOptions{})
		// Until a deleted ServiceCIDR is gone (the controller-manager
		// removes its finalizer), the apiserver's dry-run allocator, which
		// picks one range at random, may pick it and answer "allocator not
		// ready": the next test's dry-run create would fail now and then.
		if err := fixtures.Wait(time.Minute, func() bool {
			_, err := n.cs.NetworkingV1().ServiceCIDRs().Get(context.Background(), "platform-second", metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}); err != nil {
			t.Errorf("ServiceCIDR platform-second still there a minute after its deletion")
		}
	})
	if _, err := n.cs.NetworkingV1().ServiceCIDRs().Create(ctx, fixtures.ServiceCIDR("platform-second", "10.97.0.0/24"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fixtures.EventuallyNil(t, "ServiceCIDR platform-second Ready", time.Minute, func() error {
		sc, err := n.cs.NetworkingV1().ServiceCIDRs().Get(ctx, "platform-second", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range sc.Status.Conditions {
			if c.Type == networkingv1.ServiceCIDRConditionReady && c.Status == metav1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("ServiceCIDR platform-second not Ready yet: %+v", sc.Status.Conditions)
	})

	start := time.Now()
	n.run(t, ctx, n.helm, "install", "clusterip-policy", chart, "--version", version, "--plain-http", "--namespace", ns, "--wait", "--timeout", "5m",
		"--set", "replicas=2", "--set", "priorityClassName=platform-admission", "--set-json", `imagePullSecrets=[{"name":"registry-pull"}]`,
		"--set-json", `extraArgs=["--audit-interval=2m","--max-view-staleness=45s"]`,
		"--set", "dns.clusterIP=10.96.0.10", "--set", "enforcement=deny", "--set-json", n.apiserverEnv())
	t.Logf("e2e: node: helm install with non-default values: 2 pods ready in %s", time.Since(start).Round(time.Second))
	pods := n.checkPods(t, ctx, ns, 2)
	for _, p := range pods {
		args := strings.Join(p.Spec.Containers[0].Args, " ")
		if p.Spec.PriorityClassName != "platform-admission" || p.Spec.Priority == nil || *p.Spec.Priority != 900000 ||
			len(p.Spec.ImagePullSecrets) != 1 || p.Spec.ImagePullSecrets[0].Name != "registry-pull" ||
			!strings.HasSuffix(args, "--audit-interval=2m --max-view-staleness=45s") {
			t.Errorf("pod %s: priority class %q (%v), pull secrets %v, args %q; want platform-admission (900000), registry-pull, the extra flags last",
				p.Name, p.Spec.PriorityClassName, p.Spec.Priority, p.Spec.ImagePullSecrets, args)
		}
	}
	svc := fmt.Sprintf("second-range-%d", time.Now().UnixNano()%1e6)
	_, err := n.cs.CoreV1().Services("default").Create(ctx, fixtures.Service("default", svc, fixtures.WithClusterIP("10.97.0.100")), metav1.CreateOptions{})
	requireDenied(t, err, framework.MutatingWebhookName, "10.97.0.100", "lies in the dynamic band", "10.97.0.1-10.97.0.16")
	if pod, line := n.decisionInPodLogs(t, ctx, ns, svc, 30*time.Second); pod == "" {
		t.Errorf("no pod in %s logged the denial of default/%s", ns, svc)
	} else {
		t.Logf("e2e: node: on the second range 10.97.0.0/24, pod %s denied 10.97.0.100: %.160s", pod, line)
	}
	ok, err := n.cs.CoreV1().Services("default").Create(ctx, fixtures.Service("default", svc+"-static", fixtures.WithClusterIP("10.97.0.5")), metav1.CreateOptions{})
	if err != nil || ok.Spec.ClusterIP != "10.97.0.5" {
		t.Errorf("a static address in the second range's static band: %v, want it created", err)
	}
	_ = n.cs.CoreV1().Services("default").Delete(ctx, svc+"-static", metav1.DeleteOptions{})
	n.uninstall(t, ctx, ns)
}

// TestNodeKustomizeSelfSigned runs docs/install.md's seven commands for
// manifests/overlays/self-signed, read from the page (make certs, the CRD,
// the overlay, the webhook configurations once the pods are ready), with the
// image from the loopback registry and the apiserver address the pods need
// here in a wrapping overlay; reads a denial with docs/why-refused.md's
// logs | jq command; and uninstalls it as documented.
func TestNodeKustomizeSelfSigned(t *testing.T) {
	n := nodeUnderTest(t)
	ctx := testContext(t, 15*time.Minute)
	kubectl := framework.DefaultBinaries(n.root).Kubectl
	const ns = "clusterip-policy"
	// A copy of the overlay, so the certificates go into the test's directory.
	overlay := filepath.Join(n.dir, "self-signed")
	if err := os.MkdirAll(overlay, 0o755); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(n.root, "manifests", "overlays", "self-signed", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	base, err := filepath.Rel(overlay, filepath.Join(n.root, "manifests", "base"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), "- ../../base\n") {
		t.Fatal("manifests/overlays/self-signed/kustomization.yaml no longer lists ../../base: update this test")
	}
	component, err := filepath.Rel(overlay, filepath.Join(n.root, "manifests", "components", "cert-dir"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), "- ../../components/cert-dir\n") {
		t.Fatal("manifests/overlays/self-signed/kustomization.yaml no longer lists ../../components/cert-dir: update this test")
	}
	kz := strings.Replace(string(raw), "- ../../base\n", "- "+base+"\n", 1)
	kz = strings.Replace(kz, "- ../../components/cert-dir\n", "- "+component+"\n", 1)
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kz), 0o644); err != nil {
		t.Fatal(err)
	}
	n.run(t, ctx, "go", "run", "./certs/cmd/gencerts", "--out-dir", filepath.Join(overlay, "tls"), "--cabundle-patch", filepath.Join(overlay, "cabundle-patch.yaml"))
	wrap := filepath.Join(n.dir, "node")
	if err := os.MkdirAll(wrap, 0o755); err != nil {
		t.Fatal(err)
	}
	n.writeNodeKustomization(t, wrap, "../self-signed", ns, "path: my-policy.yaml")
	// The base's policy states no address and warns; the user's overlay
	// reserves the DNS address and denies (docs/install.md).
	if err := os.WriteFile(filepath.Join(wrap, "my-policy.yaml"), []byte(myPolicyPatch), 0o644); err != nil {
		t.Fatal(err)
	}
	// docs/install.md's seven commands as printed, but for two words:
	// `make certs` writes into the copy above, and -k names the wrapper.
	var script []string
	for _, c := range installBlockWith(t, n.root, "kubectl apply --server-side --force-conflicts -k manifests/overlays/self-signed") {
		if c == "make certs" {
			continue // done above, into the copy (gencerts is what make certs runs)
		}
		script = append(script, strings.ReplaceAll(c, "-k manifests/overlays/self-signed", "-k "+wrap))
	}
	start := time.Now()
	n.script(t, ctx, script)
	t.Logf("e2e: node: kubectl apply -k manifests/overlays/self-signed (image from the registry): 3 pods ready in %s", time.Since(start).Round(time.Second))
	n.checkPods(t, ctx, ns, 3)
	n.checkServiceRouting(t, ctx, ns)
	svc := fmt.Sprintf("kustomize-probe-%d", time.Now().UnixNano()%1e6)
	eventuallyDenied(t, framework.MutatingWebhookName, func() error {
		_, err := n.cs.CoreV1().Services("default").Create(ctx, fixtures.Service("default", svc, fixtures.WithClusterIP("10.96.200.7")), metav1.CreateOptions{})
		return err
	}, "10.96.200.7", "lies in the dynamic band")
	if pod, _ := n.decisionInPodLogs(t, ctx, ns, svc, 30*time.Second); pod == "" {
		t.Errorf("no pod logged the denial of default/%s", svc)
	}
	// docs/why-refused.md's command reads every pod's denials.
	denials := n.script(t, ctx, []string{whyRefusedLogsCommand(t, n.root)})
	if !strings.Contains(denials, `"name":"`+svc+`"`) || !strings.Contains(denials, `"stage":"mutate"`) {
		t.Errorf("docs/why-refused.md's logs | jq command does not show the denial of default/%s:\n%s", svc, denials)
	}
	n.breakGlassAsDocumented(t, ctx, wrap)
	n.rotateCAAsDocumented(t, ctx, wrap, overlay)
	n.awaitDNSHold(t, ctx)
	// docs/install.md, "Uninstall": the configurations and the
	// backstop's bindings first, then the overlay (namespace, Lease and
	// CRD with it), then the backstop's policies, then the holds.
	n.run(t, ctx, kubectl, "delete", "mutatingwebhookconfiguration,validatingwebhookconfiguration,validatingadmissionpolicybinding", "-l", "app.kubernetes.io/name=clusterip-policy-webhook,clusterip-policy.io/break-glass!=keep")
	n.run(t, ctx, kubectl, "delete", "-k", wrap, "--ignore-not-found", "--wait", "--timeout=3m")
	n.run(t, ctx, kubectl, "delete", "validatingadmissionpolicy,mutatingadmissionpolicy,mutatingadmissionpolicybinding", "-l", "app.kubernetes.io/name=clusterip-policy-webhook")
	n.run(t, ctx, kubectl, "delete", "ipaddresses", "-l", holdLabel)
	n.dnsAddressGivenBack(t, ctx)
	n.nothingLeft(t, ctx, ns)
}

// underLoad runs 8 clients creating, updating and deleting Services (static
// addresses in the webhook's sight, dynamic ones, and creates the policy
// denies) for at most d, while fault runs; it fails the test on any real
// error (an allowed request that failed) or a forbidden create admitted, and
// logs the figures.
//
// With podsLeave, the webhook's namespace (a rolling update, an eviction:
// the caller's fault makes webhook pods there go away
// gracefully, which the chart's --shutdown-delay is there to make invisible),
// one attempt that failed and was retried fails the test too (a client
// that does not retry would have seen it fail), and the timeline of each
// pod that left is logged: when the apiserver stopped choosing it and when
// it stopped serving.
func (n *realNode) underLoad(t *testing.T, ctx context.Context, scenario string, d time.Duration, podsLeave string, fault func() error) {
	t.Helper()
	ns := fmt.Sprintf("load-%s-%d", scenario, time.Now().Unix()%100000)
	if _, err := n.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	done := make(chan *loadResult, 1)
	start := time.Now()
	go func() {
		done <- runLoad(ctx, t, nil, loadOptions{Namespace: ns, Clients: 8, Duration: d, MaxOps: 3000, StaticPool: nodeStaticPool, Config: n.loadConfig("clusterip-policy-node-load")})
	}()
	time.Sleep(3 * time.Second) // the load runs before the fault
	var leaves *leaveWatch
	var qBefore queueReading
	var qErrBefore error
	if podsLeave != "" {
		leaves = n.watchLeaving(t, ctx, podsLeave)
		qBefore, qErrBefore = n.endpointSliceQueue(ctx)
	}
	faultStart := time.Now()
	if leaves != nil {
		leaves.faultStarts()
	}
	ferr := fault()
	faultTook := time.Since(faultStart)
	res := <-done
	took := time.Since(start)
	if ferr != nil {
		t.Errorf("the fault: %v", ferr)
	}
	if podsLeave != "" {
		qAfter, qErrAfter := n.endpointSliceQueue(ctx)
		for _, l := range leaves.settle(30 * time.Second) {
			t.Logf("e2e: node %s: %s", scenario, &l)
		}
		t.Logf("e2e: node %s: %s", scenario, queueFigures(qBefore, qAfter, qErrBefore, qErrAfter))
	}
	tl := res.tally()
	var longest time.Duration
	var longestOp string
	for _, op := range res.Ops {
		if l := op.End.Sub(op.Start); l > longest {
			longest, longestOp = l, op.Kind+" "+op.Name
		}
	}
	t.Logf("e2e: node %s: %d requests by 8 clients in %s (%d attempts, %d retried), %d succeeded (%d after retries), %d expected denials, %d refused as still held, %d real errors, %d forbidden creates admitted; fault took %s; clients saw failed attempts until %s after it began; slowest request %s (%s)",
		scenario, tl.Sent, took.Round(time.Millisecond), tl.Attempts, tl.RetriedAttempts, tl.Succeeded, tl.RetriedOK, tl.ExpectedDenials, tl.Held, tl.RealErrors, len(res.AdmittedOutside),
		faultTook.Round(time.Millisecond), res.disruption(faultStart).Round(time.Millisecond), longest.Round(time.Millisecond), longestOp)
	if tl.RealErrors > 0 {
		t.Errorf("%d requests the policy allows failed: %s", tl.RealErrors, strings.Join(res.realErrors(5), "; "))
	}
	if podsLeave != "" && tl.RetriedAttempts > 0 {
		t.Errorf("%d attempts failed while webhook pods left gracefully (each succeeded only when retried; a client that does not retry sees it fail); the first: %s",
			tl.RetriedAttempts, strings.Join(res.FailedAttemptErrs, "; "))
	}
	if len(res.AdmittedOutside) > 0 {
		t.Errorf("forbidden creates admitted: %v", res.AdmittedOutside)
	}
	if tl.ExpectedDenials == 0 {
		t.Error("no create was denied: the webhook was not in the path of the load")
	}
	if faultStart.Add(faultTook).After(start.Add(d)) {
		t.Errorf("the fault took %s, longer than the load's %s: part of it ran without load", faultTook, d)
	}
	_ = n.cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
}

// nodeStaticPool gives load client i eight static-band addresses of its own.
func nodeStaticPool(i int) []string {
	var out []string
	for j := range 8 {
		out = append(out, fmt.Sprintf("10.96.0.%d", 100+i*10+j))
	}
	return out
}

// loadConfig makes each load client's configuration for the node: its own
// connection (dialer), no client-side rate limit, a timeout above the
// webhooks' 5 s.
func (n *realNode) loadConfig(userAgent string) func() *rest.Config {
	return func() *rest.Config {
		cfg, err := clientcmd.BuildConfigFromFlags("", n.kubeconfig)
		if err != nil {
			panic(err) // read once already by nodeUnderTest
		}
		cfg.Dial = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
		cfg.QPS, cfg.Burst = 1000, 2000
		cfg.Timeout = 15 * time.Second
		cfg.UserAgent = userAgent
		return cfg
	}
}

// rollingUpdate: the same image under a new tag (pushed to the registry as a
// second tag of one digest), applied with helm upgrade: the Deployment rolls
// (maxSurge 1, maxUnavailable 0), each old pod leaves the endpoints and
// answers for --shutdown-delay before it stops.
func (n *realNode) rollingUpdate(t *testing.T, ctx context.Context, ns string) {
	named, _, _ := strings.Cut(n.env["NODE_IMAGE"], "@")
	i := strings.LastIndex(named, ":")
	repo, tag := named[:i], named[i+1:]
	newTag := tag + "-rollout"
	imagebuild := filepath.Join(n.root, "_output", "tools", "imagebuild")
	n.run(t, ctx, imagebuild, "push", "--layout", filepath.Join(n.root, "_output", "image", "clusterip-policy"), "--ref", repo+":"+newTag)
	before, err := n.cs.AppsV1().Deployments(ns).Get(ctx, "clusterip-policy-webhook", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	chart := "oci://" + n.env["NODE_REGISTRY"] + "/charts/clusterip-policy"
	n.underLoad(t, ctx, "rolling-update", 100*time.Second, ns, func() error {
		_, err := n.try(ctx, n.helm, "upgrade", "clusterip-policy", chart, "--version", strings.TrimPrefix(tag, "v"), "--plain-http",
			"--namespace", ns, "--reuse-values", "--set", "image.tag="+newTag, "--wait", "--timeout", "4m")
		return err
	})
	d, err := n.cs.AppsV1().Deployments(ns).Get(ctx, "clusterip-policy-webhook", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	img := d.Spec.Template.Spec.Containers[0].Image
	if !strings.Contains(img, ":"+newTag+"@") || d.Generation == before.Generation || d.Status.UpdatedReplicas != 3 || d.Status.ReadyReplicas != 3 {
		t.Errorf("after the upgrade the Deployment runs %s, generation %d -> %d, %d updated and %d ready replicas; want the tag %s and 3 of each",
			img, before.Generation, d.Generation, d.Status.UpdatedReplicas, d.Status.ReadyReplicas, newTag)
	}
	n.checkPods(t, ctx, ns, 3)
}

// evictions: the Eviction API (what kubectl drain uses) on one pod, then at
// once on a second: the PodDisruptionBudget (maxUnavailable 1) lets the
// first go and refuses the second until the replacement is ready.
func (n *realNode) evictions(t *testing.T, ctx context.Context, ns string) {
	n.underLoad(t, ctx, "eviction", 60*time.Second, ns, func() error {
		pods := n.checkPods(t, ctx, ns, 3)
		if len(pods) < 2 {
			return fmt.Errorf("%d ready pods, want at least 2", len(pods))
		}
		evict := func(name string) error {
			return n.cs.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}})
		}
		if err := evict(pods[0].Name); err != nil {
			return fmt.Errorf("evict %s: %w", pods[0].Name, err)
		}
		evicted := time.Now()
		err := evict(pods[1].Name)
		if err == nil {
			return errors.New("a second eviction right after the first was allowed, want 429 from the PodDisruptionBudget")
		}
		if !apierrors.IsTooManyRequests(err) {
			return fmt.Errorf("a second eviction right after the first: %w, want 429 from the PodDisruptionBudget", err)
		}
		t.Logf("e2e: node: evicted %s; the second eviction was refused: %v", pods[0].Name, err)
		// The replacement becomes ready; then a drain could go on.
		err = fixtures.Wait(90*time.Second, func() bool {
			ready := 0
			list, err := n.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=clusterip-policy-webhook"})
			for _, p := range list.Items {
				if err == nil && p.DeletionTimestamp == nil && p.UID != pods[0].UID && podReady(&p) {
					ready++
				}
			}
			return ready == 3
		})
		if err != nil {
			return fmt.Errorf("the evicted pod's replacement was not ready within 90s")
		}
		t.Logf("e2e: node: the evicted pod's replacement was ready %s after the eviction", time.Since(evicted).Round(100*time.Millisecond))
		return nil
	})
}

// restartContainerd stops the node's containerd (SIGTERM, as systemctl
// restart does) and starts it again with the same command line; the pods'
// shims keep the containers running, the kubelet reconnects.
func (n *realNode) restartContainerd(t *testing.T, ctx context.Context, ns string) {
	pidsFile := filepath.Join(n.env["NODE_DIR"], "pids")
	n.underLoad(t, ctx, "containerd-restart", 45*time.Second, "", func() error {
		raw, err := os.ReadFile(pidsFile)
		if err != nil {
			return err
		}
		lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
		for i, l := range lines {
			f := strings.Fields(l)
			if len(f) != 3 || f[0] != "containerd" {
				continue
			}
			pid, err := strconv.Atoi(f[1])
			if err != nil {
				return err
			}
			cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if err != nil {
				return fmt.Errorf("containerd (pid %d): %w", pid, err)
			}
			argv := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
			if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
				return err
			}
			for j := 0; j < 100 && syscall.Kill(pid, 0) == nil; j++ {
				time.Sleep(100 * time.Millisecond)
			}
			if syscall.Kill(pid, 0) == nil {
				return fmt.Errorf("containerd (pid %d) still runs 10s after SIGTERM", pid)
			}
			stopped := time.Now()
			p, err := framework.StartProcess("containerd", filepath.Join(n.env["NODE_DIR"], "logs", "containerd.log"), argv, framework.ProcessOptions{Detach: true})
			if err != nil {
				return err
			}
			lines[i] = fmt.Sprintf("containerd %d %s", p.Pid(), f[2])
			if err := os.WriteFile(pidsFile, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
				return err
			}
			t.Logf("e2e: node: containerd pid %d stopped, pid %d started %s later", pid, p.Pid(), time.Since(stopped).Round(time.Millisecond))
			time.Sleep(20 * time.Second) // the kubelet's PLEG and probes go on against the new containerd
			return nil
		}
		return fmt.Errorf("no containerd in %s", pidsFile)
	})
	n.checkPods(t, ctx, ns, 3)
	node, err := n.cs.CoreV1().Nodes().Get(ctx, n.env["NODE_NAME"], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			t.Errorf("node Ready=%s after the containerd restart: %s", c.Status, c.Message)
		}
	}
}

// checkPods: want pods of the Deployment Ready on the node, with pod
// addresses on the bridge, and each one's process as the kernel sees it:
// uid 65532, no capabilities, a read-only root, the Secret mounted at /tls.
func (n *realNode) checkPods(t *testing.T, ctx context.Context, ns string, want int) []corev1.Pod {
	t.Helper()
	pods, err := n.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=clusterip-policy-webhook"})
	if err != nil {
		t.Fatal(err)
	}
	var ready []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || !podReady(&p) {
			continue
		}
		ready = append(ready, p)
		if p.Spec.NodeName != n.env["NODE_NAME"] {
			t.Errorf("pod %s runs on %q, want the node %s", p.Name, p.Spec.NodeName, n.env["NODE_NAME"])
		}
		ip, err := netip.ParseAddr(p.Status.PodIP)
		if err != nil || !n.podCIDR.Contains(ip) {
			t.Errorf("pod %s has address %q, want one in %s (the bridge)", p.Name, p.Status.PodIP, n.podCIDR)
		}
		proc, err := containerProcess(string(p.UID))
		if err != nil {
			t.Errorf("pod %s: %v", p.Name, err)
			continue
		}
		// /tls is mounted where the pod asks for it (--cert-dir: cert-manager,
		// existingSecret, the self-signed overlay) and nowhere else: managed
		// certificates are read through the API, with no Secret volume.
		wantTLS := false
		for _, c := range p.Spec.Containers {
			for _, m := range c.VolumeMounts {
				wantTLS = wantTLS || m.MountPath == "/tls"
			}
		}
		if proc.uid != "65532" || proc.capEff != "0000000000000000" || !proc.rootRO || proc.tlsMounted != wantTLS {
			t.Errorf("pod %s: process %s runs as uid %s, CapEff %s, read-only root %v, /tls mounted %v; want 65532, none, true, %v",
				p.Name, proc.pid, proc.uid, proc.capEff, proc.rootRO, proc.tlsMounted, wantTLS)
		}
	}
	if len(ready) != want {
		t.Errorf("%d pods of the Deployment ready, want %d", len(ready), want)
	}
	return ready
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

type procInfo struct {
	pid                string
	uid, capEff        string
	rootRO, tlsMounted bool
}

// containerProcess finds the webhook's process of a pod on this host by its
// cgroup (the kubelet names pod cgroups pod<UID>) and reads what the kernel
// says about it.
func containerProcess(podUID string) (procInfo, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return procInfo{}, err
	}
	for _, e := range entries {
		pid := e.Name()
		if pid[0] < '0' || pid[0] > '9' {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + pid + "/cmdline")
		if err != nil || !strings.HasPrefix(string(cmdline), "/clusterip-policy\x00serve") {
			continue
		}
		cg, err := os.ReadFile("/proc/" + pid + "/cgroup")
		if err != nil || !strings.Contains(string(cg), "pod"+podUID) {
			continue
		}
		info := procInfo{pid: pid}
		status, err := os.ReadFile("/proc/" + pid + "/status")
		if err != nil {
			return info, err
		}
		for _, line := range strings.Split(string(status), "\n") {
			f := strings.Fields(line)
			switch {
			case len(f) >= 2 && f[0] == "Uid:":
				info.uid = f[1]
			case len(f) >= 2 && f[0] == "CapEff:":
				info.capEff = f[1]
			}
		}
		mi, err := os.Open("/proc/" + pid + "/mountinfo")
		if err != nil {
			return info, err
		}
		sc := bufio.NewScanner(mi)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) < 6 {
				continue
			}
			opts := "," + f[5] + ","
			switch f[4] {
			case "/":
				info.rootRO = strings.Contains(opts, ",ro,")
			case "/tls":
				info.tlsMounted = strings.Contains(opts, ",ro,")
			}
		}
		mi.Close()
		return info, nil
	}
	return procInfo{}, fmt.Errorf("no /clusterip-policy serve process in the cgroup of pod %s on this host", podUID)
}

// checkServiceRouting: the webhook configurations name the Service, not a
// URL, and the Service's endpoints are the pods' bridge addresses, which the
// apiserver (--enable-aggregator-routing) dials.
func (n *realNode) checkServiceRouting(t *testing.T, ctx context.Context, ns string) {
	t.Helper()
	m, err := n.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range m.Webhooks {
		if w.ClientConfig.URL != nil || w.ClientConfig.Service == nil || w.ClientConfig.Service.Namespace != ns {
			t.Errorf("webhook %s clientConfig %+v, want the Service in %s", w.Name, w.ClientConfig, ns)
		}
	}
	slices, err := n.cs.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=clusterip-policy-webhook"})
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			for _, a := range e.Addresses {
				ip, err := netip.ParseAddr(a)
				if err != nil || !n.podCIDR.Contains(ip) {
					t.Errorf("endpoint %s of the webhook Service is not a pod address in %s", a, n.podCIDR)
				}
				addrs = append(addrs, a)
			}
		}
	}
	if len(addrs) == 0 {
		t.Fatal("the webhook Service has no endpoints")
	}
	t.Logf("e2e: node: the webhook Service's endpoints: %s", strings.Join(addrs, " "))
}

// decisionInPodLogs looks for the audit line of a decision about a Service
// named name in the logs of the Deployment's pods (through the apiserver and
// the kubelet, as `kubectl logs` does); it returns the pod and the line.
func (n *realNode) decisionInPodLogs(t *testing.T, ctx context.Context, ns, name string, within time.Duration) (string, string) {
	t.Helper()
	// Once a second, not with fixtures.Wait: each pass reads up to 8 MiB
	// of every pod's log through the kubelet.
	deadline := time.Now().Add(within)
	var lastErr error
	for {
		pods, err := n.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=clusterip-policy-webhook"})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			raw, err := n.cs.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: "webhook", LimitBytes: ptrTo(int64(8 << 20))}).DoRaw(ctx)
			if err != nil {
				lastErr = fmt.Errorf("logs of %s: %w", p.Name, err)
				continue
			}
			for _, line := range strings.Split(string(raw), "\n") {
				var d struct {
					Name     string `json:"name"`
					Decision string `json:"decision"`
				}
				if json.Unmarshal([]byte(line), &d) == nil && d.Name == name && d.Decision != "" {
					return p.Name, line
				}
			}
		}
		if time.Now().After(deadline) {
			if lastErr != nil {
				t.Logf("reading the pods' logs: %v", lastErr)
			}
			return "", ""
		}
		time.Sleep(time.Second)
	}
}

func ptrTo[T any](v T) *T { return &v }

// uninstall runs helm uninstall and checks what docs/install.md says: the
// webhook configurations and the Deployment go with the release, and the
// post-delete hook (clusterip-policy cleanup) deletes what the pods wrote:
// the holds, the Lease and the leader's Secrets, so that kube-dns created
// naming its reserved address gets it. Then the documented clean-up of what
// helm keeps (the CRD, the namespace), after which nothing of ours is left.
func (n *realNode) uninstall(t *testing.T, ctx context.Context, ns string) {
	t.Helper()
	kubectl := framework.DefaultBinaries(n.root).Kubectl
	n.awaitDNSHold(t, ctx)
	start := time.Now()
	n.run(t, ctx, n.helm, "uninstall", "clusterip-policy", "--namespace", ns, "--wait", "--timeout", "3m")
	t.Logf("e2e: node: helm uninstall --wait (both hooks) took %s", time.Since(start).Round(time.Second))
	adm := n.cs.AdmissionregistrationV1()
	if _, err := adm.MutatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("MutatingWebhookConfiguration after helm uninstall: %v, want not found", err)
	}
	if _, err := adm.ValidatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ValidatingWebhookConfiguration after helm uninstall: %v, want not found", err)
	}
	// What the post-delete hook deleted.
	if holds := n.run(t, ctx, kubectl, "get", "ipaddresses", "-l", holdLabel, "-o", "name"); holds != "" {
		t.Errorf("holds left after helm uninstall: %s", holds)
	}
	for _, lease := range []string{"clusterip-policy-leader", "clusterip-policy-holds"} {
		if _, err := n.cs.CoordinationV1().Leases(ns).Get(ctx, lease, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the Lease %s after helm uninstall: %v, want not found", lease, err)
		}
	}
	if left := n.run(t, ctx, kubectl, "-n", ns, "get", "secrets,leases,deployments,services,serviceaccounts,roles,rolebindings", "-l", "app.kubernetes.io/name", "-o", "name"); strings.Contains(left, "clusterip-policy") {
		t.Errorf("left in %s after helm uninstall: %s", ns, left)
	}
	n.dnsAddressGivenBack(t, ctx)
	// The documented clean-up of what helm keeps (docs/install.md,
	// "Uninstalling the chart").
	n.run(t, ctx, kubectl, "delete", "crd", "clusterippolicies.clusterip-policy.io", "--wait", "--timeout=2m")
	n.run(t, ctx, kubectl, "delete", "namespace", ns, "--wait", "--timeout=3m")
	n.nothingLeft(t, ctx, ns)
}

// dnsAddressGivenBack creates kube-dns naming its reserved address, which
// the uninstall must have given back (awaitDNSHold saw it held before), and
// deletes it again.
func (n *realNode) dnsAddressGivenBack(t *testing.T, ctx context.Context) {
	t.Helper()
	if s, err := n.cs.CoreV1().Services("kube-system").Create(ctx, fixtures.Service("kube-system", "kube-dns", fixtures.WithClusterIP("10.96.0.10")), metav1.CreateOptions{}); err != nil {
		t.Errorf("kube-dns naming 10.96.0.10 after the uninstall: %v", err)
	} else {
		t.Logf("e2e: node: after the uninstall, kube-system/kube-dns naming its address got %s", s.Spec.ClusterIP)
		_ = n.cs.CoreV1().Services("kube-system").Delete(ctx, "kube-dns", metav1.DeleteOptions{})
	}
}

// awaitDNSHold deletes kube-dns if a test made it and waits until the
// leader holds its reserved 10.96.0.10: what an uninstall must give back.
func (n *realNode) awaitDNSHold(t *testing.T, ctx context.Context) {
	t.Helper()
	if err := n.cs.CoreV1().Services("kube-system").Delete(ctx, "kube-dns", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	fixtures.EventuallyNil(t, "the hold on 10.96.0.10 before the uninstall", time.Minute, func() error {
		a, err := n.cs.NetworkingV1().IPAddresses().Get(ctx, "10.96.0.10", metav1.GetOptions{})
		if err == nil && a.Labels["ipaddress.kubernetes.io/managed-by"] != "clusterip-policy.io" {
			return fmt.Errorf("10.96.0.10 is managed by %q", a.Labels["ipaddress.kubernetes.io/managed-by"])
		}
		return err
	})
}

// nothingLeft fails the test if anything of ours is in the cluster: the
// webhook configurations, cluster roles and bindings, the CRD (and with it
// the policy object), holds, or the namespace (with the Lease).
func (n *realNode) nothingLeft(t *testing.T, ctx context.Context, ns string) {
	t.Helper()
	kubectl := framework.DefaultBinaries(n.root).Kubectl
	left := n.run(t, ctx, kubectl, "get", "mutatingwebhookconfigurations,validatingwebhookconfigurations,validatingadmissionpolicies,validatingadmissionpolicybindings,mutatingadmissionpolicies,mutatingadmissionpolicybindings,clusterroles,clusterrolebindings,ipaddresses,crd", "-o", "name")
	var ours []string
	for _, l := range strings.Fields(left) {
		if strings.Contains(l, "clusterip-policy") {
			ours = append(ours, l)
		}
	}
	if holds := n.run(t, ctx, kubectl, "get", "ipaddresses", "-l", holdLabel, "-o", "name"); holds != "" {
		ours = append(ours, holds)
	}
	if _, err := n.cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		ours = append(ours, "namespace/"+ns)
	}
	if len(ours) > 0 {
		t.Errorf("left after the uninstall and the documented clean-up: %s", strings.Join(ours, " "))
	}
}

// dumpPods logs the pods' state and recent events when something failed.
func (n *realNode) dumpPods(t *testing.T, ctx context.Context, ns string) {
	kubectl := framework.DefaultBinaries(n.root).Kubectl
	out, _ := n.try(ctx, kubectl, "-n", ns, "get", "pods,endpointslices,events", "-o", "wide")
	t.Logf("pods and events in %s:\n%s", ns, out)
	out, _ = n.try(ctx, kubectl, "-n", ns, "logs", "-l", "app.kubernetes.io/name=clusterip-policy-webhook", "--tail=20", "--prefix")
	t.Logf("pod logs:\n%s", out)
}

//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// previousChartRef is the commit whose chart the upgrade scenario starts
// from: main before the webhook managed its own certificates and failure
// policy, the chart users have installed. E2E_PREVIOUS_CHART_REF overrides it.
const previousChartRef = "77cf43d"

// TestNodeLifecycle runs the paths around the engine that must never be the
// reason a Service create fails, each under 8 clients creating Services the
// policy allows (dynamic, and static-band addresses that make the apiserver
// call the webhook): a fresh helm install, the GitOps path (helm template |
// kubectl apply, twice), helm uninstall, and helm upgrade from the previous
// chart version. Each reports the failed allowed creates (must be 0), the
// attempts that failed and were retried (must be 0: kubectl, Helm and Argo
// CD do not retry), and what was admitted.
func TestNodeLifecycle(t *testing.T) {
	n := nodeUnderTest(t)
	ctx := testContext(t, 20*time.Minute)
	chart, version := n.pushChart(t, ctx)
	const ns = "cip-lifecycle"
	values := []string{"--set", "dns.clusterIP=10.96.0.10", "--set", "enforcement=deny", "--set-json", n.apiserverEnv()}
	install := func(chart string, version string, extra ...string) error {
		if err := n.restrictedNamespace(ctx, ns); err != nil { // as the README labels it
			return err
		}
		args := append([]string{"install", "clusterip-policy", chart, "--version", version, "--plain-http",
			"--namespace", ns, "--create-namespace", "--wait", "--timeout", "5m"}, values...)
		_, err := n.try(ctx, n.helm, append(args, extra...)...)
		return err
	}

	t.Run("a fresh helm install under 8 clients: no allowed create fails", func(t *testing.T) {
		n.lifecycleLoad(t, ctx, "install", 60*time.Second, func() error {
			return install(chart, version)
		})
		n.checkPods(t, ctx, ns, 3)
	})
	if t.Failed() {
		n.dumpPods(t, ctx, ns)
		return
	}

	t.Run("helm template | kubectl apply, twice (the GitOps path) under 8 clients: no allowed create fails", func(t *testing.T) {
		kubectl := framework.DefaultBinaries(n.root).Kubectl
		// helm template assumes Kubernetes v1.20 without a cluster; a
		// GitOps tool gives the cluster's version, as here.
		sv, err := n.cs.Discovery().ServerVersion()
		if err != nil {
			t.Fatal(err)
		}
		render := func() (string, error) {
			args := append([]string{"template", "clusterip-policy", chart, "--version", version, "--plain-http", "--namespace", ns, "--kube-version", sv.GitVersion}, values...)
			return n.try(ctx, n.helm, args...)
		}
		first, err := render()
		if err != nil {
			t.Fatal(err)
		}
		second, err := render()
		if err != nil {
			t.Fatal(err)
		}
		if first != second {
			t.Errorf("helm template rendered different output twice with the same values (%d and %d bytes): every GitOps sync would change the cluster", len(first), len(second))
		}
		apply := func(manifest string) error {
			f := filepath.Join(n.dir, "render.yaml")
			if err := os.WriteFile(f, []byte(manifest), 0o600); err != nil {
				return err
			}
			_, err := n.try(ctx, kubectl, "apply", "-f", f)
			return err
		}
		n.lifecycleLoad(t, ctx, "gitops", 90*time.Second, func() error {
			if err := apply(first); err != nil {
				return err
			}
			time.Sleep(20 * time.Second) // the second sync, as a GitOps tool's next interval
			return apply(second)
		})
	})

	t.Run("certificates forced to expire within a minute, renewed and the CA rotated under 8 clients: no allowed create fails", func(t *testing.T) {
		// Short lifetimes, set while no load runs: the serving certificate
		// lives 45 s (renewed at 30 s), the CA 90 s (rotated at 60 s).
		args := append([]string{"upgrade", "clusterip-policy", chart, "--version", version, "--plain-http", "--namespace", ns, "--wait", "--timeout", "5m",
			"--set", "certificate.managed.validity=45s", "--set", "certificate.managed.caValidity=90s"}, values...)
		n.run(t, ctx, n.helm, args...)
		// helm --wait returns once the new pods are ready; an old pod, with
		// the old lifetimes, keeps the Lease through its shutdown delay. A
		// CA deleted then is rotated by that old leader, with a 5-year CA
		// and a 90-day certificate, and nothing falls due in the window
		// (seen: the 45 s renewal never came). Wait for a new pod to lead.
		leadStart := time.Now()
		fixtures.EventuallyNil(t, "a new pod to lead the holds", 2*time.Minute, func() error {
			// The leader holds both Leases (docs/operations.md "Upgrading
			// from a build before v0.1.0"): a replica named on one alone
			// waits.
			holders := map[string]bool{}
			holder := ""
			for _, name := range []string{"clusterip-policy-leader", "clusterip-policy-holds"} {
				lease, err := n.cs.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				holder = ""
				if lease.Spec.HolderIdentity != nil {
					holder = *lease.Spec.HolderIdentity
				}
				holders[holder] = true
			}
			if len(holders) != 1 {
				return fmt.Errorf("the two Leases name different holders %v: no replica leads yet", holders)
			}
			pods, err := n.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=clusterip-policy-webhook"})
			if err != nil {
				return err
			}
			for _, p := range pods.Items {
				if p.Name != holder && !strings.HasPrefix(holder, p.Name+"_") {
					continue
				}
				for _, a := range p.Spec.Containers[0].Args {
					if a == "--cert-validity=45s" && p.DeletionTimestamp == nil {
						return nil
					}
				}
			}
			return fmt.Errorf("the Lease is held by %q, not a running pod with --cert-validity=45s", holder)
		})
		t.Logf("e2e: node lifecycle certificates: a pod with the short lifetimes led %s after helm upgrade returned", time.Since(leadStart).Round(time.Second))
		served := func() string {
			s, err := n.cs.CoreV1().Secrets(ns).Get(ctx, "clusterip-policy-webhook-tls", metav1.GetOptions{})
			if err != nil {
				return "error: " + err.Error()
			}
			return string(s.Data["tls.crt"]) + string(s.Data["ca.crt"])
		}
		before := served()
		var renewals int
		n.lifecycleLoad(t, ctx, "certificates", 100*time.Second, func() error {
			// The lifetimes apply to what is issued next: deleting the CA's
			// Secret makes the leader rotate to a new CA (its documented
			// forced rotation), whose certificates live 45 s and 90 s.
			if err := n.cs.CoreV1().Secrets(ns).Delete(ctx, "clusterip-policy-webhook-ca", metav1.DeleteOptions{}); err != nil {
				return err
			}
			last := before
			for range 90 {
				time.Sleep(time.Second)
				if now := served(); now != last {
					renewals++
					last = now
				}
			}
			return nil
		})
		t.Logf("e2e: node lifecycle certificates: the served Secret changed %d times in 90 s", renewals)
		// What the leader says it issued, to tell a renewal it did not do
		// from one this poll did not see.
		if logs, err := n.try(ctx, framework.DefaultBinaries(n.root).Kubectl, "-n", ns, "logs", "-l", "app.kubernetes.io/name=clusterip-policy-webhook", "--tail=-1", "--prefix", "--max-log-requests=10"); err == nil {
			var issued []string
			lines := strings.Split(logs, "\n")
			for _, l := range lines {
				if strings.Contains(l, `"logger":"certificates"`) && len(issued) < 60 {
					issued = append(issued, l)
				}
			}
			t.Logf("e2e: node lifecycle certificates: of %d log lines, the certificates logger's:\n%s", len(lines), strings.Join(issued, "\n"))
		} else {
			t.Logf("e2e: node lifecycle certificates: the pods' logs: %v", err)
		}
		// The rotation to the new CA (90 s) issues a 45 s certificate at
		// about 5 s (the settle), renewed at about 35 s; the CA falls due at
		// 60 s and its successor's certificate follows at about 65 s.
		if renewals < 3 {
			t.Errorf("the serving Secret changed %d times in 90 s after the CA's Secret was deleted, want 3 or more: the rotation, the 45 s certificate's renewal, the next CA's certificate", renewals)
		}
		args = append([]string{"upgrade", "clusterip-policy", chart, "--version", version, "--plain-http", "--namespace", ns, "--wait", "--timeout", "5m"}, values...)
		n.run(t, ctx, n.helm, args...)
	})

	t.Run("the webhook made unreachable from the apiserver: the operator is told within a minute (status, metric)", func(t *testing.T) {
		// A firewall between the control plane and the pods, as a GKE
		// private cluster has for any port but 443 and 10250: the webhook
		// Service's targetPort points at a port nothing listens on, so
		// the apiserver's calls are refused while the pods run.
		svc, err := n.cs.CoreV1().Services(ns).Get(ctx, "clusterip-policy-webhook", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		orig := svc.DeepCopy()
		for i := range svc.Spec.Ports {
			svc.Spec.Ports[i].TargetPort = intstr.FromInt32(9)
		}
		if _, err := n.cs.CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		cut := time.Now()
		restore := func() {
			cur, err := n.cs.CoreV1().Services(ns).Get(ctx, orig.Name, metav1.GetOptions{})
			if err == nil {
				cur.Spec.Ports = orig.Spec.Ports
				_, err = n.cs.CoreV1().Services(ns).Update(ctx, cur, metav1.UpdateOptions{})
			}
			if err != nil {
				t.Errorf("restore the webhook Service: %v", err)
			}
		}
		defer restore()
		fixtures.EventuallyNil(t, "WebhookReachable False with the Service pointing nowhere", time.Minute, func() error {
			out, err := n.try(ctx, framework.DefaultBinaries(n.root).Kubectl, "get", "clusterippolicy", "default", "-o", `jsonpath={.status.conditions[?(@.type=="WebhookReachable")].status}`)
			if err != nil {
				return err
			}
			if out != "False" {
				return fmt.Errorf("WebhookReachable is %q", out)
			}
			return nil
		})
		t.Logf("e2e: node lifecycle unreachable: the ClusterIPPolicy status said WebhookReachable=False %s after the webhook Service pointed nowhere", time.Since(cut).Round(time.Second))
		var gauge string
		fixtures.EventuallyNil(t, "a pod's webhook_reachable gauge at 0", time.Minute, func() error {
			for _, p := range n.checkPods(t, ctx, ns, 3) {
				body, err := httpGet(ctx, "http://"+net.JoinHostPort(p.Status.PodIP, "8080")+"/metrics")
				if err != nil {
					continue
				}
				for _, l := range strings.Split(body, "\n") {
					if strings.HasPrefix(l, "clusterip_policy_webhook_reachable{") && strings.HasSuffix(l, " 0") {
						gauge = p.Name + ": " + l
						return nil
					}
				}
			}
			return errors.New("no pod's clusterip_policy_webhook_reachable is 0")
		})
		t.Logf("e2e: node lifecycle unreachable: %s (the alert ClusterIPPolicyWebhookUnreachable reads it; its promtool tests are in manifests/testdata)", gauge)
		restore()
		fixtures.EventuallyNil(t, "WebhookReachable True after the Service was restored", time.Minute, func() error {
			out, err := n.try(ctx, framework.DefaultBinaries(n.root).Kubectl, "get", "clusterippolicy", "default", "-o", `jsonpath={.status.conditions[?(@.type=="WebhookReachable")].status}`)
			if err != nil {
				return err
			}
			if out != "True" {
				return fmt.Errorf("WebhookReachable is %q after the Service was restored", out)
			}
			return nil
		})
	})

	t.Run("helm uninstall under 8 clients: no allowed create fails, nothing of ours left", func(t *testing.T) {
		// Helm deletes the webhook Service before the webhook
		// configurations (kinds it does not know come last in its uninstall
		// order); without the chart's pre-delete hook (unregister) the
		// apiserver called a Service that was gone for 1-3 s (2-19 retried
		// creates in four runs). With it, the configurations go first.
		// The post-delete hook (cleanup) waits for the pods to go, within
		// their grace period: the load runs until it is done. Its log,
		// gone with the Job, is read while it runs.
		hookLog := make(chan string, 1)
		n.lifecycleLoad(t, ctx, "uninstall", 100*time.Second, func() error {
			go func() { hookLog <- n.followHookLog(ctx, ns, "clusterip-policy-cleanup", 3*time.Minute) }()
			_, err := n.try(ctx, n.helm, "uninstall", "clusterip-policy", "--namespace", ns, "--wait", "--timeout", "3m")
			return err
		})
		select {
		case l := <-hookLog:
			t.Logf("e2e: node lifecycle uninstall: the post-delete hook's log:\n%s", l)
		case <-time.After(10 * time.Second):
			t.Log("e2e: node lifecycle uninstall: the post-delete hook's log was not read")
		}
		n.cleanUp(t, ctx, ns)
		n.nothingLeft(t, ctx, ns)
	})

	t.Run("helm upgrade from the previous chart version under 8 clients: no allowed create fails", func(t *testing.T) {
		// The previous chart rendered a Helm-generated certificate into the
		// serving Secret and every caBundle, with failurePolicy Fail. This
		// chart keeps both through the upgrade (Helm's three-way merge
		// deleted them: the new pods then waited for a Secret only a leader
		// of theirs writes while an old pod held the Lease, and every call
		// failed TLS; TestHelmUpgradeFromThePreviousChart), so old and new
		// pods serve the same certificate until the new leader moves it to
		// a CA of its own.
		prevChart, prevVersion := n.pushPreviousChart(t, ctx)
		// The previous chart shipped no ResourceQuota: on this node, as on
		// GKE, its system-cluster-critical pods would never be admitted, so
		// it is installed as it had to be there, without a priority class.
		// The upgrade's pre-upgrade hook Job then starts through the
		// chart's pre-upgrade copy of the quota (the release has none yet),
		// and the new pods through the release's.
		if err := install(prevChart, prevVersion, "--set", "priorityClassName="); err != nil {
			t.Fatalf("install the previous chart: %v", err)
		}
		// This chart's CRD has no field the previous one lacks: make the
		// cluster's older (no spec.exemptions), so that the upgrade's
		// pre-upgrade hook (clusterip-policy apply-crd) has one to bring.
		kubectl := framework.DefaultBinaries(n.root).Kubectl
		n.run(t, ctx, kubectl, "patch", "crd", "clusterippolicies.clusterip-policy.io", "--type=json", "-p",
			`[{"op":"remove","path":"/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/exemptions"}]`)
		n.lifecycleLoad(t, ctx, "upgrade", 90*time.Second, func() error {
			args := append([]string{"upgrade", "clusterip-policy", chart, "--version", version, "--plain-http",
				"--namespace", ns, "--wait", "--timeout", "5m"}, values...)
			_, err := n.try(ctx, n.helm, args...)
			return err
		})
		if by := n.run(t, ctx, kubectl, "get", "crd", "clusterippolicies.clusterip-policy.io", "-o", `jsonpath={.metadata.annotations.clusterip-policy\.io/applied-by-version}`); by == "" {
			out, _ := n.try(ctx, kubectl, "-n", ns, "logs", "-l", "app.kubernetes.io/name=clusterip-policy-apply-crd", "--tail=20", "--prefix")
			t.Errorf("the CRD carries no clusterip-policy.io/applied-by-version after the upgrade: the pre-upgrade hook did not apply it; its pods said:\n%s", out)
			n.dumpPods(t, ctx, ns)
		}
		fixtures.EventuallyNil(t, "spec.exemptions kept by the upgraded CRD", 30*time.Second, func() error {
			if _, err := n.try(ctx, kubectl, "patch", "clusterippolicy", "default", "--type=merge", "-p", `{"spec":{"exemptions":{"namespaces":["e2e-upgrade"]}}}`); err != nil {
				return err
			}
			got, err := n.try(ctx, kubectl, "get", "clusterippolicy", "default", "-o", "jsonpath={.spec.exemptions.namespaces}")
			if err == nil && !strings.Contains(got, "e2e-upgrade") {
				err = fmt.Errorf("spec.exemptions stored as %q: pruned by the previous CRD", got)
			}
			return err
		})
		// The new leader takes the previous chart's certificate over: a CA
		// of its own in the caBundle, then its serving certificate, and the
		// Secret labelled its own (the chart stops rendering it then).
		took := time.Now()
		fixtures.EventuallyNil(t, "the webhook to manage its serving Secret", 2*time.Minute, func() error {
			s, err := n.cs.CoreV1().Secrets(ns).Get(ctx, "clusterip-policy-webhook-tls", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if by := s.Labels["app.kubernetes.io/managed-by"]; by != "clusterip-policy" {
				return fmt.Errorf("the serving Secret is managed by %q", by)
			}
			return nil
		})
		t.Logf("e2e: node upgrade: the leader had taken the serving Secret over %s after the upgrade returned", time.Since(took).Round(time.Second))
		if _, err := n.try(ctx, n.helm, "uninstall", "clusterip-policy", "--namespace", ns, "--wait", "--timeout", "2m"); err != nil {
			t.Error(err)
		}
		n.cleanUp(t, ctx, ns)
	})
}

// pushPreviousChart packages the chart of previousChartRef (with that
// commit's own packaging script) with the node's image, and pushes it.
func (n *realNode) pushPreviousChart(t *testing.T, ctx context.Context) (ref, version string) {
	t.Helper()
	commit := previousChartRef
	if v := os.Getenv("E2E_PREVIOUS_CHART_REF"); v != "" {
		commit = v
	}
	src := filepath.Join(n.dir, "previous")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	archive := exec.CommandContext(ctx, "sh", "-c", fmt.Sprintf("git -C %q archive %q charts/clusterip-policy hack/package-chart.sh | tar -x -C %q", n.root, commit, src))
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("the chart of %s: %v\n%s", commit, err, out)
	}
	named, digest, _ := strings.Cut(n.env["NODE_IMAGE"], "@")
	repo := named[:strings.LastIndex(named, ":")]
	const prev = "v0.0.9-previous"
	cmd := exec.CommandContext(ctx, filepath.Join(src, "hack", "package-chart.sh"), repo, prev, digest, filepath.Join(n.dir, "previous-chart"))
	cmd.Env = append(os.Environ(), "HELM="+n.helm)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("package the chart of %s: %v", commit, err)
	}
	n.run(t, ctx, n.helm, "push", strings.TrimSpace(string(out)), "oci://"+n.env["NODE_REGISTRY"]+"/previous", "--plain-http")
	t.Logf("e2e: node upgrade: the previous chart is charts/clusterip-policy of %s, packaged as %s", commit, prev)
	return "oci://" + n.env["NODE_REGISTRY"] + "/previous/clusterip-policy", strings.TrimPrefix(prev, "v")
}

// followHookLog waits (within d) for the pod of the hook Job name in ns and
// returns its log, followed until the container ends: a hook's Job is
// deleted once it succeeded, with its log.
func (n *realNode) followHookLog(ctx context.Context, ns, name string, d time.Duration) string {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	kubectl := framework.DefaultBinaries(n.root).Kubectl
	for ctx.Err() == nil {
		pods, err := n.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + name})
		if err == nil && len(pods.Items) > 0 && pods.Items[0].Status.Phase != corev1.PodPending {
			out, err := n.try(ctx, kubectl, "-n", ns, "logs", "-f", "pod/"+pods.Items[0].Name)
			if err != nil {
				return fmt.Sprintf("%s(kubectl logs: %v)", out, err)
			}
			return out
		}
		time.Sleep(200 * time.Millisecond)
	}
	return "(no pod of " + name + " within " + d.String() + ")"
}

// cleanUp runs the documented clean-up after helm uninstall
// (docs/install.md): the CRD, the Lease, the holds and the namespace.
func (n *realNode) cleanUp(t *testing.T, ctx context.Context, ns string) {
	t.Helper()
	kubectl := framework.DefaultBinaries(n.root).Kubectl
	n.run(t, ctx, kubectl, "delete", "crd", "clusterippolicies.clusterip-policy.io", "--ignore-not-found", "--wait", "--timeout=2m")
	n.run(t, ctx, kubectl, "delete", "ipaddresses", "-l", holdLabel)
	n.run(t, ctx, kubectl, "delete", "namespace", ns, "--ignore-not-found", "--wait", "--timeout=3m")
}

// lifecycleLoad runs 8 clients creating, updating and deleting Services the
// policy allows, for d, and runs step 3 s into it. A lifecycle step must
// cost no client anything: it fails the test on any failed allowed create
// and on any attempt that failed and was retried (a client that does not
// retry, as kubectl, Helm and Argo CD do not, would have seen it fail).
func (n *realNode) lifecycleLoad(t *testing.T, ctx context.Context, scenario string, d time.Duration, step func() error) {
	t.Helper()
	ns := fmt.Sprintf("life-%s-%d", scenario, time.Now().Unix()%100000)
	if _, err := n.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = n.cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) }()
	done := make(chan *loadResult, 1)
	start := time.Now()
	go func() {
		done <- runLoad(ctx, t, nil, loadOptions{Namespace: ns, Clients: 8, Duration: d, MaxOps: 3000, StaticPool: nodeStaticPool, Config: n.loadConfig("clusterip-policy-node-lifecycle"), AllowedOnly: true})
	}()
	time.Sleep(3 * time.Second) // the load runs before the step
	stepStart := time.Now()
	serr := step()
	stepTook := time.Since(stepStart)
	res := <-done
	if serr != nil {
		t.Errorf("%s: %v", scenario, serr)
	}
	tl := res.tally()
	t.Logf("e2e: node lifecycle %s: %d requests by 8 clients in %s (%d attempts, %d retried), %d succeeded (%d after retries), %d refused as still held, %d failed allowed requests; the step took %s; clients saw failed attempts until %s after it began",
		scenario, tl.Sent, time.Since(start).Round(time.Millisecond), tl.Attempts, tl.RetriedAttempts, tl.Succeeded, tl.RetriedOK, tl.Held, tl.RealErrors,
		stepTook.Round(time.Millisecond), res.disruption(stepStart).Round(time.Millisecond))
	if tl.RealErrors > 0 {
		t.Errorf("%d requests the policy allows failed: %s", tl.RealErrors, strings.Join(res.realErrors(5), "; "))
	}
	if tl.RetriedAttempts > 0 {
		t.Errorf("%d attempts failed and were retried (a client that does not retry sees each fail); the first: %s", tl.RetriedAttempts, strings.Join(res.FailedAttemptErrs, "; "))
	}
	if stepStart.Add(stepTook).After(start.Add(d)) {
		t.Errorf("the step took %s, longer than the load's %s: part of it ran without load", stepTook, d)
	}
}

// httpGet reads at most 4 MiB of a pod's plain-HTTP endpoint on the node's
// own bridge, within 5 s.
func httpGet(ctx context.Context, url string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return string(b), err
}

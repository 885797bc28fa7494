//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"clusterip-policy/internal/testutil"
	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

const (
	mutating   = framework.MutatingWebhookName
	validating = framework.ValidatingWebhookName
)

// kubeDNS is the Service of the Kubernetes docs (CoreDNS's deployment
// manifest), as kubectl users apply it.
const kubeDNS = `apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  annotations:
    prometheus.io/port: "9153"
    prometheus.io/scrape: "true"
  labels:
    k8s-app: kube-dns
    kubernetes.io/cluster-service: "true"
    kubernetes.io/name: "CoreDNS"
spec:
  selector:
    k8s-app: kube-dns
  clusterIP: 10.96.0.10
  ports:
  - name: dns
    port: 53
    protocol: UDP
  - name: dns-tcp
    port: 53
    protocol: TCP
  - name: metrics
    port: 9153
    protocol: TCP
`

// kubeDNSWithoutIP is the same Service without a clusterIP.
var kubeDNSWithoutIP = strings.Replace(kubeDNS, "  clusterIP: 10.96.0.10\n", "", 1)

// namespace creates a namespace for this test; its Services are deleted when
// the test ends. (Namespaces themselves are never removed: without a
// kube-controller-manager they would stay Terminating.)
func namespace(t *testing.T, c *framework.Cluster, prefix string) string {
	t.Helper()
	ctx := testContext(t, 30e9)
	ns, err := c.Client(0).CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() { deleteServices(t, c.Client(0), ns.Name) })
	return ns.Name
}

func deleteServices(t *testing.T, cs kubernetes.Interface, ns string) {
	lctx, lcancel := context.WithTimeout(context.Background(), 60e9)
	l, err := cs.CoreV1().Services(ns).List(lctx, metav1.ListOptions{})
	lcancel()
	if err != nil {
		t.Errorf("list Services of %s for clean-up: %v", ns, err)
		return
	}
	// Services have no deletecollection: one delete each, four at a time,
	// with a budget that grows with their number (a test that created
	// 1,500 ran out of a fixed minute on a busy CI machine).
	ctx, cancel := context.WithTimeout(context.Background(), 60e9+time.Duration(len(l.Items))*100*time.Millisecond)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := make(chan string)
	for range 4 {
		wg.Go(func() {
			for name := range next {
				if err := cs.CoreV1().Services(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					mu.Lock()
					t.Errorf("delete Service %s/%s: %v", ns, name, err)
					mu.Unlock()
				}
			}
		})
	}
	for _, s := range l.Items {
		next <- s.Name
	}
	close(next)
	wg.Wait()
}

func create(ctx context.Context, cs kubernetes.Interface, s *corev1.Service) (*corev1.Service, error) {
	return cs.CoreV1().Services(s.Namespace).Create(ctx, s, metav1.CreateOptions{})
}

func dryRunCreate(ctx context.Context, cs kubernetes.Interface, s *corev1.Service) (*corev1.Service, error) {
	return cs.CoreV1().Services(s.Namespace).Create(ctx, s, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
}

// mustCreate creates s and fails the test unless it is admitted.
func mustCreate(t *testing.T, ctx context.Context, cs kubernetes.Interface, s *corev1.Service) *corev1.Service {
	t.Helper()
	got, err := create(ctx, cs, s)
	if err != nil {
		t.Fatalf("create Service %s/%s (clusterIP %q): %v", s.Namespace, s.Name, s.Spec.ClusterIP, err)
	}
	return got
}

// deniedBy reports whether err is the denial of webhook (the admission
// webhook's name as the apiserver quotes it).
func deniedBy(err error, webhook string) bool {
	return err != nil && strings.Contains(err.Error(), fmt.Sprintf("admission webhook %q denied the request", webhook))
}

// deniedByBackstop reports whether err is a refusal by one of the
// backstop's ValidatingAdmissionPolicies (docs/backstop.md).
func deniedByBackstop(err error) bool {
	return err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy 'clusterip-policy-backstop-")
}

// requireDenied fails the test unless err is webhook's denial and its
// message holds every part.
func requireDenied(t *testing.T, err error, webhook string, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("request admitted, want a denial by %s containing %q", webhook, parts)
	}
	if !deniedBy(err, webhook) {
		t.Fatalf("want a denial by %s, got: %v", webhook, err)
	}
	var se *apierrors.StatusError
	if !errors.As(err, &se) {
		t.Fatalf("want an API status error, got %T: %v", err, err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("denial lacks %q:\n%v", p, err)
		}
	}
}

// The dynamic band of 10.96.0.0/16, the shared cluster's range
// (docs/apiserver-facts.md), where every Service without a clusterIP lands.
var dynamicBand16 = band{netip.MustParseAddr("10.96.1.1"), netip.MustParseAddr("10.96.255.254")}

type band struct{ first, last netip.Addr }

func (b band) contains(ip string) bool {
	a, err := netip.ParseAddr(ip)
	return err == nil && a.Compare(b.first) >= 0 && a.Compare(b.last) <= 0
}

func (b band) String() string { return b.first.String() + "-" + b.last.String() }

// ipAddressExists reports whether an IPAddress object holds ip.
func ipAddressExists(t *testing.T, ctx context.Context, cs kubernetes.Interface, ip string) bool {
	t.Helper()
	_, err := cs.NetworkingV1().IPAddresses().Get(ctx, ip, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		t.Fatalf("get IPAddress %s: %v", ip, err)
	}
	return true
}

// decisionsFor are the webhook's audit lines about namespace/name.
func decisionsFor(c *framework.Cluster, namespace, name string) []framework.Decision {
	var out []framework.Decision
	for _, w := range c.Webhooks {
		for _, d := range w.Decisions() {
			if d.Namespace == namespace && d.Name == name {
				out = append(out, d)
			}
		}
	}
	return out
}

// eventuallyDenied retries do for up to 5 seconds while it fails for another
// reason than webhook's denial (for example the apiserver's own "already
// allocated" while the webhook's view is a few milliseconds behind), then
// requires webhook's denial with every part.
func eventuallyDenied(t *testing.T, webhook string, do func() error, parts ...string) {
	t.Helper()
	var err error
	_ = fixtures.Wait(5*time.Second, func() bool {
		err = do()
		return err == nil || deniedBy(err, webhook)
	})
	requireDenied(t, err, webhook, parts...)
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

// helmRunner runs helm (bin) from the repository root against the cluster
// of kubeconfig, with helm's cache, config and data under dir, not HOME.
type helmRunner struct{ bin, root, dir, kubeconfig string }

// run runs helm args for at most 90s; the error names the command and
// holds its output.
func (h helmRunner) run(ctx context.Context, args ...string) (string, error) {
	hctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(hctx, h.bin, append(args, "--kubeconfig", h.kubeconfig)...)
	cmd.Dir = h.root
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(h.dir, "cache"), "HELM_CONFIG_HOME="+filepath.Join(h.dir, "config"), "HELM_DATA_HOME="+filepath.Join(h.dir, "data"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String(), err
}

// repoAndHelm returns the repository's root and the helm that
// hack/build-tools.sh builds beside kubectl; without it the test is skipped
// (failed under CI=true, testutil.MissingTool).
func repoAndHelm(t *testing.T) (root, helm string) {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	helm = filepath.Join(filepath.Dir(framework.DefaultBinaries(root).Kubectl), "helm")
	if _, err := os.Stat(helm); err != nil {
		testutil.MissingTool(t, "no helm at %s (run hack/build-tools.sh): %v", helm, err)
	}
	return root, helm
}

// startRegistry starts a registry on loopback storing under dir, stopped
// when the test ends (its log shown when the test failed).
func startRegistry(t *testing.T, ctx context.Context, dir string) *framework.Registry {
	t.Helper()
	reg, err := framework.StartRegistry(ctx, dir, framework.ProcessOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		reg.Stop(5 * time.Second)
		if t.Failed() {
			t.Logf("registry log:\n%s", reg.Tail(40))
		}
	})
	return reg
}

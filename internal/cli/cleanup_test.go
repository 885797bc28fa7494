package cli

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"clusterip-policy/internal/exitcode"
	"clusterip-policy/pkg/holds"
	"clusterip-policy/test/fixtures"
)

// Each flag cleanup cannot use is refused before it reaches a cluster,
// with the value and the fix.
func TestCleanupRefusesBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"cleanup", "-n", "x", "x.yaml"}, `unexpected argument "x.yaml"`},
		{[]string{"cleanup", "-n", "x", "--timeout=0s"}, "--timeout 0s: use 1s to 10m"},
		{[]string{"cleanup", "-n", "x", "--timeout=11m"}, "--timeout 11m0s: use 1s to 10m"},
		{[]string{"cleanup", "-n", "x", "--pod-selector="}, `--pod-selector "" selects every pod`},
		{[]string{"cleanup", "-n", "x", "--pod-selector=a b"}, `--pod-selector "a b"`},
		{[]string{"cleanup", "-n", "x", "--leader-election-lease=Holds"}, `--leader-election-lease "Holds" is not a Lease name`},
		{[]string{"cleanup", "-n", "x", "--leader-election-previous-lease=Holds"}, `--leader-election-previous-lease "Holds" is not a Lease name`},
		{[]string{"cleanup", "-n", "x", "--secret=a/b"}, `--secret "a/b" is not a Secret name`},
		{[]string{"cleanup", "-n", "x", "--validating-webhook-configuration="}, "must name the configurations"},
	} {
		code, out, stderr := runCLI("", c.args...)
		if code != exitcode.BadData || out != "" || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and %q", c.args, code, out, stderr, c.want)
		}
	}
}

// cleanup deletes the holds, the Lease and the leader's Secrets once the
// pods are gone, and never the apiserver's IPAddresses or a Secret someone
// else made. (The real apiserver's preconditions are proved by
// test/e2e's TestCleanupLeavesNothingOfTheWebhooks.)
func TestCleanupDeletesOnlyWhatTheWebhookWrote(t *testing.T) {
	objs := []runtime.Object{
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "clusterip-policy-webhook-1", Namespace: "cp", Labels: map[string]string{"app.kubernetes.io/name": "clusterip-policy-webhook"}}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "cp"}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "clusterip-policy-leader", Namespace: "cp"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "clusterip-policy-webhook-tls", Namespace: "cp", Labels: map[string]string{"app.kubernetes.io/managed-by": "clusterip-policy"}}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "clusterip-policy-webhook-ca", Namespace: "cp", Labels: map[string]string{"app.kubernetes.io/managed-by": "Helm"}}},
		fixtures.IPAddress("10.96.0.10", holds.ManagedBy, "kube-system", "kube-dns"),
		fixtures.IPAddress("10.96.0.11", holds.ManagedBy, "kube-system", "kube-dns"),
		fixtures.IPAddress("10.96.0.1", "ipallocator.k8s.io", "kube-system", "kube-dns"),
	}
	for i := range 1200 { // more than two pages
		objs = append(objs, fixtures.IPAddress(fmt.Sprintf("10.97.%d.%d", i/250, i%250), holds.ManagedBy, "kube-system", "kube-dns"))
	}
	client := fake.NewClientset(objs...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o := cleanupOptions{namespace: "cp", mutating: "clusterip-policy", validating: "clusterip-policy", podSelector: "app.kubernetes.io/name=clusterip-policy-webhook", lease: "clusterip-policy-leader", previousLease: "clusterip-policy-holds",
		secrets: []string{"clusterip-policy-webhook-tls", "clusterip-policy-webhook-ca", "absent"}, timeout: time.Minute, pollEvery: 10 * time.Millisecond}
	// The pod goes while cleanup waits; nothing may be deleted before.
	go func() {
		time.Sleep(100 * time.Millisecond)
		if n := countHolds(t, client); n != 1202 {
			t.Errorf("%d holds left while a pod of the webhook still ran, want 1202", n)
		}
		_ = client.CoreV1().Pods("cp").Delete(ctx, "clusterip-policy-webhook-1", metav1.DeleteOptions{})
	}()
	var out bytes.Buffer
	var failed string
	code := cleanup(ctx, client, o, &out, func(f string, a ...any) int { failed = f; return exitcode.Unreadable })
	if code != exitcode.OK {
		t.Fatalf("exit %d (%s); output:\n%s", code, failed, out.String())
	}
	for _, want := range []string{
		"waiting for the pods app.kubernetes.io/name=clusterip-policy-webhook in cp to go: clusterip-policy-webhook-1",
		"Lease cp/clusterip-policy-leader: deleted",
		"Lease cp/clusterip-policy-holds: already gone",
		"Secret cp/clusterip-policy-webhook-tls: deleted",
		"Secret cp/clusterip-policy-webhook-ca: kept: not made by the webhook",
		"Secret cp/absent: already gone",
		"IPAddress holds (ipaddress.kubernetes.io/managed-by=clusterip-policy.io): 1202 deleted, 0 already gone",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	left, _ := client.NetworkingV1().IPAddresses().List(ctx, metav1.ListOptions{})
	if len(left.Items) != 1 || left.Items[0].Name != "10.96.0.1" {
		t.Errorf("IPAddresses left: %d, want only the apiserver's 10.96.0.1", len(left.Items))
	}
	if _, err := client.CoreV1().Secrets("cp").Get(ctx, "clusterip-policy-webhook-ca", metav1.GetOptions{}); err != nil {
		t.Errorf("the Secret Helm made was deleted: %v", err)
	}
}

// A pod that never goes stops cleanup at --timeout with exit 3, naming the
// pod and the fix, and nothing deleted.
func TestCleanupWaitsForThePodsAndNoLonger(t *testing.T) {
	client := fake.NewClientset(
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "stuck", Namespace: "cp", Labels: map[string]string{"app": "w"}}},
		fixtures.IPAddress("10.96.0.10", holds.ManagedBy, "kube-system", "kube-dns"),
	)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var msg string
	code := cleanup(ctx, client, cleanupOptions{namespace: "cp", podSelector: "app=w", mutating: "m", validating: "v", timeout: 300 * time.Millisecond, pollEvery: 20 * time.Millisecond}, &bytes.Buffer{},
		func(f string, a ...any) int { msg = fmt.Sprintf(f, a...); return exitcode.Unreadable })
	if code != exitcode.Unreadable || !strings.Contains(msg, "pods app=w in cp still there after --timeout 300ms: stuck") || !strings.Contains(msg, "run cleanup again") {
		t.Errorf("exit %d, %q; want 3 naming the pod and the fix", code, msg)
	}
	if n := countHolds(t, client); n != 1 {
		t.Errorf("%d holds left, want the one, untouched", n)
	}
}

func countHolds(t *testing.T, client *fake.Clientset) int {
	l, err := client.NetworkingV1().IPAddresses().List(context.Background(), metav1.ListOptions{LabelSelector: holds.Selector})
	if err != nil {
		t.Error(err)
		return -1
	}
	return len(l.Items)
}

// While a webhook configuration exists the webhook is installed: cleanup
// given the wrong namespace (no pods to wait for) refuses, naming the
// configuration and the fix, and deletes nothing.
func TestCleanupRefusesWhileTheWebhookIsRegistered(t *testing.T) {
	for _, obj := range []runtime.Object{
		&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "clusterip-policy"}},
		&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "clusterip-policy"}},
	} {
		client := fake.NewClientset(obj, fixtures.IPAddress("10.96.0.10", holds.ManagedBy, "kube-system", "kube-dns"))
		var msg string
		code := cleanup(context.Background(), client, cleanupOptions{namespace: "default", podSelector: "app=w", mutating: "clusterip-policy", validating: "clusterip-policy", timeout: time.Second, pollEvery: 10 * time.Millisecond},
			&bytes.Buffer{}, func(f string, a ...any) int { msg = fmt.Sprintf(f, a...); return exitcode.Unreadable })
		if code != exitcode.Unreadable || !strings.Contains(msg, "WebhookConfiguration clusterip-policy exists: the webhook is still installed") || !strings.Contains(msg, "nothing was deleted") {
			t.Errorf("%T: exit %d, %q", obj, code, msg)
		}
		if n := countHolds(t, client); n != 1 {
			t.Errorf("%T: %d holds left, want the one, untouched", obj, n)
		}
	}
}

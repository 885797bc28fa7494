//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"clusterip-policy/docs"
	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// loopbackGate is a TCP forwarder on loopback that the webhook
// configurations point at: closed (every connection is closed at once, as
// with no ready endpoint), or open to one webhook. Closing it also cuts the
// connections the apiserver keeps alive, so the webhook is unreachable at
// once.
type loopbackGate struct {
	ln     net.Listener
	mu     sync.Mutex
	target string
	conns  map[net.Conn]bool
}

func newLoopbackGate(t *testing.T) *loopbackGate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &loopbackGate{ln: ln, conns: map[net.Conn]bool{}}
	t.Cleanup(func() { ln.Close(); g.close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			g.mu.Lock()
			target := g.target
			if target != "" {
				g.conns[c] = true
			}
			g.mu.Unlock()
			if target == "" {
				c.Close()
				continue
			}
			go g.forward(c, target)
		}
	}()
	return g
}

func (g *loopbackGate) Addr() string { return g.ln.Addr().String() }

func (g *loopbackGate) forward(c net.Conn, target string) {
	up, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		c.Close()
		return
	}
	g.mu.Lock()
	g.conns[up] = true
	g.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
	c.Close()
	up.Close()
	g.mu.Lock()
	delete(g.conns, c)
	delete(g.conns, up)
	g.mu.Unlock()
}

// open sends new connections to target.
func (g *loopbackGate) open(target string) {
	g.mu.Lock()
	g.target = target
	g.mu.Unlock()
}

// close refuses new connections and cuts the open ones.
func (g *loopbackGate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.target = ""
	for c := range g.conns {
		c.Close()
	}
	clear(g.conns)
}

// createLoad is clients creating allowed Services (plain, dynamic) in ns
// until stopped, counting the creates that succeeded and those that failed.
type createLoad struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	firstErrs  []string
	stop       chan struct{}
	wg         sync.WaitGroup
}

func startCreateLoad(ctx context.Context, cs kubernetes.Interface, ns, prefix string, clients int) *createLoad {
	l := &createLoad{stop: make(chan struct{})}
	for i := range clients {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for n := 0; ; n++ {
				select {
				case <-l.stop:
					return
				case <-ctx.Done():
					return
				default:
				}
				_, err := create(ctx, cs, fixtures.Service(ns, fmt.Sprintf("%s-%d-%d", prefix, i, n)))
				switch {
				case err == nil:
					l.ok.Add(1)
				case ctx.Err() != nil:
					return
				default:
					l.failed.Add(1)
					l.mu.Lock()
					if len(l.firstErrs) < 5 {
						l.firstErrs = append(l.firstErrs, err.Error())
					}
					l.mu.Unlock()
				}
			}
		}()
	}
	return l
}

func (l *createLoad) halt() (ok, failed int64, errs []string) {
	close(l.stop)
	l.wg.Wait()
	return l.ok.Load(), l.failed.Load(), l.firstErrs
}

// failurePolicies reads the failurePolicy of the two Service webhooks.
func failurePolicies(ctx context.Context, cs kubernetes.Interface) (mutating, validating string, err error) {
	m, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
	if err != nil {
		return "", "", err
	}
	v, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
	if err != nil {
		return "", "", err
	}
	get := func(fp *admv1.FailurePolicyType) string {
		if fp == nil {
			return "<nil>"
		}
		return string(*fp)
	}
	for _, w := range m.Webhooks {
		if w.Name == framework.MutatingWebhookName {
			mutating = get(w.FailurePolicy)
		}
	}
	for _, w := range v.Webhooks {
		if w.Name == framework.ValidatingWebhookName {
			validating = get(w.FailurePolicy)
		}
	}
	return mutating, validating, nil
}

// failurePoliciesAre says whether the two Service webhooks' failurePolicy
// are mutating and validating, for a wait: a failed read is wrapped, a
// policy not yet the one wanted is named.
func failurePoliciesAre(ctx context.Context, cs kubernetes.Interface, mutating, validating string) error {
	m, v, err := failurePolicies(ctx, cs)
	if err != nil {
		return fmt.Errorf("read the failure policies: %w", err)
	}
	if m != mutating || v != validating {
		return fmt.Errorf("mutating %s validating %s, want %s and %s", m, v, mutating, validating)
	}
	return nil
}

// registerAsShipped creates the two webhook configurations of
// manifests/base exactly as shipped, not armed (Ignore), pointed at addr.
func registerAsShipped(t *testing.T, ctx context.Context, c *framework.Cluster, addr string) *framework.WebhookConfigurations {
	t.Helper()
	wc, err := framework.LoadWebhookConfigurations(c.Root)
	if err != nil {
		t.Fatal(err)
	}
	wc.PointAt(addr, c.WebhookCA.CertPEM)
	cs := c.Client(0)
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, wc.Validating, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, wc.Mutating, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return wc
}

// reachableCondition is the ClusterIPPolicy's WebhookReachable condition as
// "status reason: message".
func reachableCondition(ctx context.Context, c *framework.Cluster) string {
	out, _, _ := c.Kubectl(ctx, "", "get", "clusterippolicy", "default", "-o", `jsonpath={.status.conditions[?(@.type=="WebhookReachable")].status} {.status.conditions[?(@.type=="WebhookReachable")].reason}: {.status.conditions[?(@.type=="WebhookReachable")].message}`)
	return out
}

// TestArmingTheFailurePolicy installs as the manifests do, on a real
// kube-apiserver, with the webhook run as the base runs it
// (--arm-failure-policy, the policy object, the shipped RBAC):
//
//  1. The configurations are created not armed while the apiserver cannot
//     reach the webhook (a ready replica behind a closed loopback gate, as
//     before its endpoints exist); clients creating allowed Services from
//     that moment see no failure, and the leader does not arm what it
//     cannot reach.
//  2. A create that breaks the policy is admitted meanwhile (Ignore).
//  3. The gate opens: the leader arms both Service webhooks (Fail) within
//     seconds, and the audit run at once after arming names the Service of
//     step 2 (a Warning Event on it), although its interval is 10 minutes.
//     The same create is now denied.
//  4. The configurations are applied again as shipped (Ignore), as a GitOps
//     sync does: the leader arms them again within seconds, no allowed
//     create fails.
//  5. The gate closes: within a minute the status condition
//     WebhookReachable and clusterip_policy_webhook_reachable say so, and
//     the webhooks stay Fail (fail-closed): a create fails calling them.
//  6. The gate opens again: reachable again.
//
// Without the backstop, which would refuse the create of step 2 as soon as
// the configurations exist: this test is about what the webhook alone does
// while not armed (TestBackstopHoldsWhileTheWebhookCannotAnswer has the
// backstop).
func TestArmingTheFailurePolicy(t *testing.T) {
	c := own(t, framework.Options{Webhooks: 0, ArmByLeader: true, NoRegister: true, NoBackstop: true,
		WebhookArgs: []string{"--policy-source=crd", "--arm-failure-policy", "--audit-interval=10m"}})
	cs := c.Client(0)
	ctx := testContext(t, 6*time.Minute)
	installPolicyObject(t, ctx, c, policyObject(""))
	if err := c.StartWebhooks(ctx, 1); err != nil {
		t.Fatal(err)
	}
	w := c.Webhooks[0]
	gate := newLoopbackGate(t)
	ns := namespace(t, c, "arming")

	// 1. Not armed, not reachable: nothing fails, nothing is armed.
	shipped := registerAsShipped(t, ctx, c, gate.Addr())
	load := startCreateLoad(ctx, cs, ns, "install", 4)
	// 2. A reserved address taken while nothing reviews creates.
	squatter, err := create(ctx, cs, fixtures.Service(ns, "squatter", fixtures.WithClusterIP("10.96.0.10")))
	if err != nil {
		t.Fatalf("with the webhook unreachable and not armed, the create should be admitted unchecked: %v", err)
	}
	fixtures.EventuallyNil(t, "WebhookReachable False naming the webhooks not armed", 60*time.Second, func() error {
		if got := reachableCondition(ctx, c); !strings.HasPrefix(got, "False Unreachable: ") || !strings.Contains(got, "(failurePolicy Ignore: not armed)") {
			return fmt.Errorf("WebhookReachable %q, want False/Unreachable naming the webhooks not armed", got)
		}
		return nil
	})
	if m, v, err := failurePolicies(ctx, cs); err != nil || m != "Ignore" || v != "Ignore" {
		t.Fatalf("unreachable, the leader armed anyway: mutating %s validating %s (%v)", m, v, err)
	}
	// The install check of the README and docs/install.md fails while the
	// apiserver cannot reach the pods (they are Ready all the same).
	check := readmeReachableCheck(t, c.Root)
	if out, errOut, err := c.Kubectl(ctx, "", strings.Fields(strings.Replace(strings.TrimPrefix(check, "kubectl "), "--timeout=2m", "--timeout=5s", 1))...); err == nil {
		t.Fatalf("the documented install check %q passed while the webhook is unreachable:\n%s%s", check, out, errOut)
	}
	t.Logf("e2e: not armed and unreachable: %s", reachableCondition(ctx, c))

	// 3. The first ready replica becomes reachable.
	opened := time.Now()
	gate.open(w.Addr())
	fixtures.EventuallyNil(t, "the leader to arm both webhooks (failurePolicy Fail)", 60*time.Second, func() error {
		return failurePoliciesAre(ctx, cs, "Fail", "Fail")
	})
	armedIn := time.Since(opened)
	if out, errOut, err := c.Kubectl(ctx, "", strings.Fields(strings.TrimPrefix(check, "kubectl "))...); err != nil {
		t.Fatalf("the documented install check %q failed once the webhook is reachable: %v\n%s%s", check, err, out, errOut)
	}
	// Creates keep running against the armed webhooks. This stays a time
	// window: the apiserver loads the armed configurations from its
	// informer a moment after the write, and failurePolicy shows in an
	// answer only when a call fails, which is step 5. The creates answered
	// in the window are counted, so an empty window fails the test.
	okArmed := load.ok.Load()
	time.Sleep(2 * time.Second)
	ok, failed, errs := load.halt()
	t.Logf("e2e: armed %s after the webhook became reachable; %d allowed creates from the moment the configurations existed (%d after they were armed), %d failed", armedIn.Round(100*time.Millisecond), ok, ok-okArmed, failed)
	if failed != 0 || ok == okArmed {
		t.Fatalf("%d of %d allowed creates failed (want 0), %d succeeded after arming (want some): %q", failed, ok+failed, ok-okArmed, errs)
	}
	fixtures.EventuallyNil(t, "the periodic audit's Event on the squatter", 60*time.Second, func() error {
		if n := policyEvents(t, ctx, cs)[ns+"/"+squatter.Name]; n == 0 {
			return fmt.Errorf("no %s Event on %s/%s", auditEventReason, ns, squatter.Name)
		}
		return nil
	})
	_, err = create(ctx, cs, fixtures.Service(ns, "squatter-2", fixtures.WithClusterIP("10.96.0.10")))
	requireDenied(t, err, mutating, "is reserved for Service kube-system/kube-dns")
	if got := metricSum(t, ctx, c, "clusterip_policy_webhook_reachable", ""); got != 2 {
		t.Errorf("clusterip_policy_webhook_reachable sums to %v on the leader, want 1 per stage", got)
	}

	// 4. A GitOps sync applies the configurations as shipped again.
	load = startCreateLoad(ctx, cs, ns, "resync", 4)
	reapplied := time.Now()
	m, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	shipped.Mutating.ResourceVersion, shipped.Validating.ResourceVersion = m.ResourceVersion, v.ResourceVersion
	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, shipped.Mutating, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, shipped.Validating, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	fixtures.EventuallyNil(t, "the leader to arm the re-applied configurations", 60*time.Second, func() error {
		return failurePoliciesAre(ctx, cs, "Fail", "Fail")
	})
	rearmedIn := time.Since(reapplied)
	ok, failed, errs = load.halt()
	t.Logf("e2e: re-armed %s after the configurations were applied again as shipped; %d allowed creates meanwhile, %d failed", rearmedIn.Round(100*time.Millisecond), ok, failed)
	if failed != 0 {
		t.Fatalf("%d of %d allowed creates failed (want 0): %q", failed, ok+failed, errs)
	}

	// 5. The apiserver loses the webhook.
	closed := time.Now()
	gate.close()
	fixtures.EventuallyNil(t, "WebhookReachable False naming the webhooks armed, the gauge at 0", 60*time.Second, func() error {
		got := reachableCondition(ctx, c)
		if !strings.HasPrefix(got, "False Unreachable: ") || !strings.Contains(got, "(failurePolicy Fail)") {
			return fmt.Errorf("WebhookReachable %q, want False/Unreachable naming the webhooks armed", got)
		}
		if n := metricSum(t, ctx, c, "clusterip_policy_webhook_reachable", ""); n != 0 {
			return fmt.Errorf("clusterip_policy_webhook_reachable sums to %v, want 0", n)
		}
		return nil
	})
	t.Logf("e2e: reported unreachable %s after the gate closed: %s", time.Since(closed).Round(100*time.Millisecond), reachableCondition(ctx, c))
	if m, v, err := failurePolicies(ctx, cs); err != nil || m != "Fail" || v != "Fail" {
		t.Fatalf("unreachable, the webhooks must stay armed (fail-closed): mutating %s validating %s (%v)", m, v, err)
	}
	if _, err := create(ctx, cs, fixtures.Service(ns, "while-unreachable")); err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
		t.Fatalf("armed and unreachable, a create should fail calling the webhook: %v", err)
	}

	// 5b. docs/emergency.md's one command, as printed, takes the webhook
	// out of the path at once, and nothing puts it back but the operator:
	// the leader, still running and probing, only reports NotRegistered.
	args := emergencyArgs(t, c.Root)
	if out, errOut, err := c.Kubectl(ctx, "", args...); err != nil {
		t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
	}
	// It leaves the admission policy that bounds the webhook's account to
	// dry runs in default: a stolen token still creates nothing there.
	if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, "clusterip-policy-webhook-probe-dry-run-only", metav1.GetOptions{}); err != nil {
		t.Errorf("after the emergency command the binding clusterip-policy-webhook-probe-dry-run-only is gone: %v", err)
	}
	outOfPath := time.Now()
	fixtures.EventuallyNil(t, "a create through after the emergency command", 30*time.Second, func() error {
		_, err := create(ctx, cs, fixtures.Service(ns, fmt.Sprintf("out-of-path-%d", time.Now().UnixNano()%1e6)))
		return err
	})
	t.Logf("e2e: emergency: a create went through %s after the documented command, the webhook still unreachable", time.Since(outOfPath).Round(100*time.Millisecond))
	fixtures.EventuallyNil(t, "WebhookReachable False NotRegistered", 60*time.Second, func() error {
		if got := reachableCondition(ctx, c); !strings.HasPrefix(got, "False NotRegistered: ") {
			return fmt.Errorf("WebhookReachable %q, want False/NotRegistered", got)
		}
		return nil
	})
	// The alert ClusterIPPolicyWebhookNotRegistered reads this gauge: 0 on
	// the leader for both stages (its promtool test holds the rest).
	for _, stage := range []string{"mutate", "validate"} {
		if v, err := c.WebhookMetric(ctx, 0, "clusterip_policy_webhook_registered", `stage="`+stage+`"`); err != nil || v != 0 {
			t.Errorf("after the emergency command, clusterip_policy_webhook_registered{stage=%q} is %v (%v), want 0", stage, v, err)
		}
	}
	adm := cs.AdmissionregistrationV1()
	if _, err := adm.MutatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{}); err == nil {
		t.Fatal("after the emergency command something recreated the mutating webhook configuration")
	}
	if _, err := adm.ValidatingWebhookConfigurations().Get(ctx, "clusterip-policy", metav1.GetOptions{}); err == nil {
		t.Fatal("after the emergency command something recreated the validating webhook configuration")
	}
	// Put back as an install or a sync does, the apiserver still cut off.
	registerAsShipped(t, ctx, c, gate.Addr())

	// 6. Back.
	gate.open(w.Addr())
	fixtures.EventuallyNil(t, "WebhookReachable True again", 60*time.Second, func() error {
		if got := reachableCondition(ctx, c); !strings.HasPrefix(got, "True Reachable: ") {
			return fmt.Errorf("WebhookReachable %q, want True", got)
		}
		return nil
	})
	mustCreate(t, ctx, cs, fixtures.Service(ns, "after"))
}

// readmeReachableCheck is the README install block's last command: the
// check that the apiservers reach the webhook.
func readmeReachableCheck(t *testing.T, root string) string {
	t.Helper()
	for _, b := range docs.Blocks(readText(t, filepath.Join(root, "README.md"))) {
		for _, c := range docs.Commands(b) {
			if strings.HasPrefix(c, "kubectl wait --for=condition=WebhookReachable ") {
				return c
			}
		}
	}
	t.Fatal("README.md has no kubectl wait --for=condition=WebhookReachable command")
	return ""
}

// emergencyCommand is the one command of docs/emergency.md's shell block.
func emergencyCommand(t *testing.T, root string) string {
	t.Helper()
	var cmds []string
	for _, b := range docs.Blocks(readText(t, filepath.Join(root, "docs", "emergency.md"))) {
		cmds = append(cmds, docs.Commands(b)...)
	}
	if len(cmds) != 1 || !strings.HasPrefix(cmds[0], "kubectl ") {
		t.Fatalf("docs/emergency.md shows %q; want one kubectl command", cmds)
	}
	return cmds[0]
}

// emergencyArgs are the arguments of docs/emergency.md's command after
// "kubectl", split as a shell splits them: single quotes group and are
// removed (the command quotes its label selector, which holds "!=").
func emergencyArgs(t *testing.T, root string) []string {
	t.Helper()
	cmd := strings.TrimPrefix(emergencyCommand(t, root), "kubectl ")
	var args []string
	var cur strings.Builder
	quoted, inWord := false, false
	for _, r := range cmd {
		switch {
		case r == '\'':
			quoted, inWord = !quoted, true
		case (r == ' ' || r == '\t') && !quoted:
			if inWord {
				args = append(args, cur.String())
				cur.Reset()
			}
			inWord = false
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quoted {
		t.Fatalf("docs/emergency.md's command has an unclosed quote: %q", cmd)
	}
	if inWord {
		args = append(args, cur.String())
	}
	return args
}

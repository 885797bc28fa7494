//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math/big"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// The webhook reloads its serving certificate from --cert-dir: replacing the
// files (same CA, so the caBundle stays valid) must not fail a single
// request, nor restart the process.
func TestServingCertificateRotation(t *testing.T) {
	c := shared(t)
	cs := c.Client(0)
	w := c.Webhooks[0]
	ns := namespace(t, c, "cert-rotation")
	pid := w.Pid()
	oldSerial, err := w.ServedSerial()
	if err != nil {
		t.Fatalf("connect to the webhook: %v", err)
	}

	// flowing is how many requests each step of the rotation waits to see
	// answered.
	const flowing = 100
	// Two clients send requests the webhook must decide, one denied and one
	// admitted, until told to stop.
	began := time.Now()
	ctx, stop := context.WithCancel(testContext(t, 2*60e9))
	var requests, failures atomic.Int64
	var mu sync.Mutex
	var failed []string
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				var err error
				var ok bool
				if i%2 == 0 {
					_, err = dryRunCreate(ctx, cs, fixtures.Service(ns, fmt.Sprintf("denied-%d-%d", g, i), fixtures.WithClusterIP("10.96.200.5")))
					ok = deniedBy(err, mutating)
				} else {
					_, err = dryRunCreate(ctx, cs, fixtures.Service(ns, fmt.Sprintf("admitted-%d-%d", g, i), fixtures.WithClusterIP("10.96.0.60")))
					ok = err == nil
				}
				if ctx.Err() != nil {
					return // the request was cut short by the test, not failed
				}
				requests.Add(1)
				if !ok {
					failures.Add(1)
					mu.Lock()
					failed = append(failed, fmt.Sprintf("request %d of client %d: %v", i, g, err))
					mu.Unlock()
				}
			}
		}()
	}

	// Requests flow before, during and after each rotation: each step
	// waits until flowing more have been answered (counted when they
	// return), however slow the machine.
	answered := func(what string, from int64) {
		t.Helper()
		if fixtures.Wait(30*time.Second, func() bool { return requests.Load()-from >= flowing }) != nil {
			stop()
			wg.Wait()
			t.Fatalf("only %d requests were answered in 30s %s, want %d", requests.Load()-from, what, flowing)
		}
	}
	answered("before the first rotation", 0)
	var newSerial *big.Int
	var took time.Duration
	for round := 1; round <= 2; round++ {
		rotated := time.Now()
		if newSerial, err = w.RotateCert(); err != nil {
			stop()
			wg.Wait()
			t.Fatalf("rotate: %v", err)
		}
		var served *big.Int
		for time.Since(rotated) < 30*time.Second {
			if served, err = w.ServedSerial(); err == nil && served.Cmp(newSerial) == 0 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		took = time.Since(rotated)
		if served == nil || served.Cmp(newSerial) != 0 {
			stop()
			wg.Wait()
			t.Fatalf("rotation %d: the webhook still serves serial %v 30s after the files were replaced (last error %v)", round, served, err)
		}
		t.Logf("e2e: rotation %d: the webhook served the new certificate %s after the files were replaced", round, took.Round(time.Millisecond))
		answered(fmt.Sprintf("after rotation %d", round), requests.Load())
	}
	stop()
	wg.Wait()

	t.Logf("e2e: %d requests in %s, during two certificate rotations, %d failed", requests.Load(), time.Since(began).Round(time.Millisecond), failures.Load())
	if failures.Load() > 0 {
		t.Errorf("%d of %d requests failed:\n%v", failures.Load(), requests.Load(), failed)
	}
	if oldSerial.Cmp(newSerial) == 0 {
		t.Error("the serial did not change")
	}
	if exited, err := w.Exited(); exited || w.Pid() != pid {
		t.Errorf("the webhook restarted or exited (pid %d, was %d, exit %v)", w.Pid(), pid, err)
	}
	requireFreshHandshake(t, c, ns)
}

// requireFreshHandshake proves the apiserver accepts the certificate the
// webhook serves now. Its connections from before the rotation stay open
// (TLS checks certificates only at the handshake), so register one more
// validating webhook at a URL it has never called (localhost instead of
// 127.0.0.1), for labelled Services only, and require a decision through it.
func requireFreshHandshake(t *testing.T, c *framework.Cluster, ns string) {
	t.Helper()
	ctx := testContext(t, 60e9)
	requireHandshakeThrough(t, ctx, c, ns, c.Configs.Validating.DeepCopy(), "e2e-fresh-handshake", "with the rotated certificate")
}

// requireHandshakeThrough registers check (a copy of a validating
// configuration) as configName with its first webhook only, at localhost,
// for Services labelled e2e-fresh-handshake, and waits (30 s at most) for a
// dry-run create that both validating webhooks decide.
func requireHandshakeThrough(t *testing.T, ctx context.Context, c *framework.Cluster, ns string, check *admv1.ValidatingWebhookConfiguration, configName, what string) {
	t.Helper()
	cs := c.Client(0)
	check.ObjectMeta = metav1.ObjectMeta{Name: configName}
	check.Webhooks = check.Webhooks[:1]
	check.Webhooks[0].Name = "fresh-handshake.e2e.clusterip-policy.io"
	url := fmt.Sprintf("https://localhost:%d%s", c.Webhooks[0].Port, framework.ValidatePath)
	check.Webhooks[0].ClientConfig.URL = &url
	check.Webhooks[0].ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"e2e-fresh-handshake": "true"}}
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, check, metav1.CreateOptions{}); err != nil {
		t.Fatalf("register %s: %v", check.Name, err)
	}
	defer func() {
		// Its own deadline: ctx may be spent when a wait below gave up. A
		// configuration left behind sends labelled Services to localhost
		// for the rest of the cluster's life and refuses the next register.
		deleteCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(deleteCtx, check.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete the check's configuration %s: %v", check.Name, err)
		}
	}()
	start := time.Now()
	tries := 0
	fixtures.EventuallyNil(t, "a request to reach the webhook through a new connection", 30*time.Second, func() error {
		tries++
		name := fmt.Sprintf("fresh-handshake-%d", tries)
		svc := fixtures.Service(ns, name)
		svc.Labels = map[string]string{"e2e-fresh-handshake": "true"}
		_, err := dryRunCreate(ctx, cs, svc)
		validations := 0
		for _, d := range decisionsFor(c, ns, name) {
			if d.Stage == "validate" {
				validations++
			}
		}
		if err != nil {
			return fmt.Errorf("the dry-run create (%d validate decisions): %w", validations, err)
		}
		if validations != 2 {
			return fmt.Errorf("%d validate decisions, want 2", validations)
		}
		return nil
	})
	t.Logf("e2e: the apiserver completed a new TLS handshake %s (%s)", what, time.Since(start).Round(time.Millisecond))
}

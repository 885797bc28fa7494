package framework

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// WebhookEndpoint is the host:port the apiservers are sent to: the only
// webhook, or a haproxy in front of several that sends new connections
// only to replicas whose /readyz answers 200, as the endpoints of the
// webhook's Service would.
func (c *Cluster) WebhookEndpoint(ctx context.Context) (string, error) {
	switch {
	case len(c.Webhooks) == 0:
		return "", errors.New("no webhook is running")
	case len(c.Webhooks) == 1:
		return c.Webhooks[0].Addr(), nil
	case c.WebhookLB == nil:
		var backends []Backend
		for _, w := range c.Webhooks {
			backends = append(backends, Backend{Name: w.Name, Addr: w.Addr(), CheckAddr: w.HealthAddr})
		}
		lb, err := StartHAProxy(ctx, c.Dir, backends, HAProxyOptions{Name: "webhook-lb", Timeout: 30 * time.Second}, ProcessOptions{Detach: c.opts.Detach})
		if err != nil {
			return "", err
		}
		c.WebhookLB = lb
	}
	return c.WebhookLB.Addr(), nil
}

// RegisterWebhooks creates (or replaces) the webhook configurations of the
// manifests, pointed at WebhookEndpoint, armed (failurePolicy Fail on the
// Service webhooks, as the leader sets it) unless Options.ArmByLeader, and
// waits until every apiserver calls both webhooks.
func (c *Cluster) RegisterWebhooks(ctx context.Context) error {
	addr, err := c.WebhookEndpoint(ctx)
	if err != nil {
		return err
	}
	wc, err := LoadWebhookConfigurations(c.Root)
	if err != nil {
		return err
	}
	caPEM := c.WebhookCA.CertPEM
	if c.opts.ManagedCerts {
		caPEM = nil // the leader writes it; a harness CA would be replaced
	}
	wc.PointAt(addr, caPEM)
	if !c.opts.ArmByLeader {
		wc.Arm()
	}
	c.Configs = wc
	cs := c.Client(0)
	// Validating first: once the mutating webhook is called, both are.
	if err := createOrReplace(func() error {
		_, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, wc.Validating, metav1.CreateOptions{})
		return err
	}, func() error {
		old, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, wc.Validating.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		wc.Validating.ResourceVersion = old.ResourceVersion
		_, err = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, wc.Validating, metav1.UpdateOptions{})
		return err
	}); err != nil {
		return fmt.Errorf("register ValidatingWebhookConfiguration: %w", err)
	}
	if err := createOrReplace(func() error {
		_, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, wc.Mutating, metav1.CreateOptions{})
		return err
	}, func() error {
		old, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, wc.Mutating.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		wc.Mutating.ResourceVersion = old.ResourceVersion
		_, err = cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, wc.Mutating, metav1.UpdateOptions{})
		return err
	}); err != nil {
		return fmt.Errorf("register MutatingWebhookConfiguration: %w", err)
	}
	c.Logf("e2e: registered webhook configurations from %s at https://%s", wc.Source, addr)
	return c.WaitWebhooksCalled(ctx)
}

func createOrReplace(create, replace func() error) error {
	err := create()
	if apierrors.IsAlreadyExists(err) {
		err = replace()
	}
	return err
}

// WaitWebhooksCalled returns once every apiserver sends a Service create to
// both webhooks: a server-side dry run of a headless Service in namespace
// default, repeated until the webhook logs show a mutate and a validate
// decision for it. Registration reaches the apiservers through their
// informers, so the first requests after it may pass unchecked. Headless,
// because it names an address ("None"): the managed matchCondition of
// --manage-match-conditions skips a create that names none and owns no
// reservation, and the leader may write it before this probe runs.
func (c *Cluster) WaitWebhooksCalled(ctx context.Context) error {
	start := time.Now()
	for i := range c.APIServers {
		cs := c.Client(i)
		err := poll(ctx, fmt.Sprintf("%s calling the webhooks", c.APIServers[i].Name), 30*time.Second, 200*time.Millisecond, c.Processes(), func(ctx context.Context) (bool, error) {
			name := "e2e-probe-" + randomSuffix()
			svc := &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
				Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Port: 80}}},
			}
			if _, err := cs.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
				return false, err
			}
			stages := map[string]bool{}
			for _, w := range c.Webhooks {
				for _, d := range w.Decisions() {
					if d.Name == name {
						stages[d.Stage] = true
					}
				}
			}
			if stages["mutate"] && stages["validate"] {
				return true, nil
			}
			return false, fmt.Errorf("dry-run create of default/%s reached the webhooks in stages %v", name, stages)
		})
		if err != nil {
			return err
		}
	}
	c.Logf("e2e: every apiserver calls the webhooks (%s after registration)", time.Since(start).Round(time.Millisecond))
	return nil
}

package framework

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"clusterip-policy/certs"
)

// StartWebhookWithArgs starts one more webhook like StartWebhooks, talking
// to server (an https:// URL; the first apiserver when empty), with extra
// `clusterip-policy serve` flags (for example a short --max-view-staleness), and
// waits until it is ready. It is not registered with the apiservers: tests
// send it reviews with Review.
func (c *Cluster) StartWebhookWithArgs(ctx context.Context, server string, args ...string) (*Webhook, error) {
	if server == "" {
		server = c.APIServers[0].URL
	}
	if err := c.ensureWebhookCA(); err != nil {
		return nil, err
	}
	if c.PolicyFile == "" {
		if c.PolicyFile = c.opts.PolicyFile; c.PolicyFile == "" {
			c.PolicyFile = filepath.Join(c.Dir, "policy.yaml")
			if err := certs.WriteFileAtomic(c.PolicyFile, []byte(c.opts.Policy), 0o644); err != nil {
				return nil, err
			}
		}
	}
	id, err := c.webhookIdentity()
	if err != nil {
		return nil, err
	}
	name := fmt.Sprintf("webhook-%d", len(c.Webhooks)+1)
	kubeconfig := filepath.Join(c.Dir, name+".kubeconfig")
	if err := id.WriteKubeconfig(kubeconfig, server, c.PKI.CA.CertPEM); err != nil {
		return nil, err
	}
	o := WebhookOptions{Name: name, Kubeconfig: kubeconfig, Policy: c.PolicyFile, ExtraArgs: args}
	start := time.Now()
	var w *Webhook
	if err := retryPortClash(func() (err error) {
		w, err = StartWebhook(ctx, c.Bin.Webhook, c.Dir, c.WebhookCA, o, ProcessOptions{Detach: c.opts.Detach})
		return err
	}); err != nil {
		return nil, err
	}
	c.Webhooks = append(c.Webhooks, w)
	c.Logf("e2e: %s ready in %s on %s with %v, talking to %s as %s", name, time.Since(start).Round(time.Millisecond), w.Addr(), args, server, id.User)
	return w, nil
}

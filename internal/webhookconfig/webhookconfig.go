// Package webhookconfig is the one way the leader's loops change the two
// webhook configurations: read the object (get), edit the Service
// webhook's entry (or, for the caBundle, every webhook's) in place, write
// it back (update), retrying a conflict on a fresh read. The update carries
// what was read, so each loop changes only its own fields (the managed
// matchCondition: internal/controllers/matchconditions; failurePolicy:
// internal/controllers/arming; the caBundle:
// internal/controllers/servingcerts) and everything else (the static
// conditions, what another loop wrote) stays as read. Names are the two
// configurations, bound by their flags once and handed to every loop that
// reads or writes them.
package webhookconfig

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"clusterip-policy/internal/names"
)

// FieldManager is the field manager of every write but those of a
// Configuration WrittenBy another.
const FieldManager = "clusterip-policy-webhook"

// conflictBackoff bounds the retries of one write on conflicts: 6 tries
// within about 0.7 s (20 ms doubling, with jitter).
var conflictBackoff = wait.Backoff{Steps: 6, Duration: 20 * time.Millisecond, Factor: 2, Jitter: 0.2}

// Names are the two webhook configurations: serve binds their flags once
// (AddFlags) and hands the one value to every loop that reads or writes
// them (the matchConditions, the arming, the backstop, the certificates,
// the namespaces judged).
type Names struct {
	Mutating, Validating string
}

// AddFlags declares the configurations' flags, checked by Validate.
func (n *Names) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&n.Mutating, "mutating-webhook-configuration", "clusterip-policy", "Name of the MutatingWebhookConfiguration whose webhook "+names.MutatingServiceWebhook+" gets the managed matchCondition, whose webhooks get the caBundle with --certificate-source=managed, and whose namespaceSelector says, with the validating one's, which namespaces the holds and the periodic audit cover.")
	fs.StringVar(&n.Validating, "validating-webhook-configuration", "clusterip-policy", "Name of the ValidatingWebhookConfiguration whose webhook "+names.ValidatingServiceWebhook+" gets the managed matchCondition, whose webhooks get the caBundle with --certificate-source=managed, and whose namespaceSelector says, with the mutating one's, which namespaces the holds and the periodic audit cover.")
}

// Validate checks the flags, naming the flags and the fix.
func (n Names) Validate() error {
	if n.Mutating == "" || n.Validating == "" {
		return errors.New("--mutating-webhook-configuration and --validating-webhook-configuration must name the configurations (clusterip-policy in manifests/base)")
	}
	return nil
}

// Entry is one webhook of a configuration (the Service webhook, or each
// webhook with EveryWebhook), as pointers into the object read, so an Edit
// changes the object that is written back.
type Entry struct {
	MatchConditions *[]admissionregistrationv1.MatchCondition
	FailurePolicy   **admissionregistrationv1.FailurePolicyType
	ClientConfig    *admissionregistrationv1.WebhookClientConfig
}

// Configuration is one of the two webhook configurations as Update reads
// and writes it: C is the typed object.
type Configuration[C any] struct {
	// Kind, Name, the Flag that names it and the Webhook (the Service
	// webhook's name) say in errors which object is meant and how to fix it.
	Kind, Name, Flag, Webhook string
	get                       func(ctx context.Context, name string, opts metav1.GetOptions) (C, error)
	put                       func(ctx context.Context, cfg C, opts metav1.UpdateOptions) (C, error)
	// entries returns the object's metadata and each entry named Webhook,
	// or every entry when every is set.
	entries func(cfg C, every bool) (*metav1.ObjectMeta, []Entry)
	// every: an Edit is handed every webhook of the configuration (EveryWebhook).
	every bool
	// manager is the field manager of the write ("": FieldManager).
	manager string
	// watched, if set, reads the object from a watch (ReadFrom); copyOf
	// copies what it returns, which a lister shares and must not change.
	watched func() (C, error)
	copyOf  func(C) C
}

// ReadFrom is c with watched as the first read of an Update: the object
// as a watch last saw it (a lister's). When the edit changes nothing in
// it, Update is done without a request; otherwise, or when watched fails,
// Update reads and writes through the API as without it. A loop that
// verifies the configurations every few seconds then costs the apiserver
// nothing while they are as wanted, and a change made by someone else
// still reaches it with the watch's next event.
func (c Configuration[C]) ReadFrom(watched func() (C, error)) Configuration[C] {
	c.watched = watched
	return c
}

// EveryWebhook is c with every webhook of the configuration as its
// entries, not only the Service webhook: the caBundle is every webhook's,
// as the ServiceCIDR and ClusterIPPolicy webhooks are served by the same
// port. A configuration without webhooks is then no error: there is
// nothing to edit.
func (c Configuration[C]) EveryWebhook() Configuration[C] {
	c.every = true
	return c
}

// WrittenBy is c written as fieldManager: a loop whose fields must stay
// its own in managedFields (the caBundle, which a Helm upgrade by
// server-side apply must not take back) writes as itself.
func (c Configuration[C]) WrittenBy(fieldManager string) Configuration[C] {
	c.manager = fieldManager
	return c
}

// Mutating is the MutatingWebhookConfiguration n names and its webhook
// names.MutatingServiceWebhook.
func Mutating(client kubernetes.Interface, n Names) Configuration[*admissionregistrationv1.MutatingWebhookConfiguration] {
	api := client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	return Configuration[*admissionregistrationv1.MutatingWebhookConfiguration]{
		Kind: "MutatingWebhookConfiguration", Name: n.Mutating, Flag: "--mutating-webhook-configuration", Webhook: names.MutatingServiceWebhook,
		get: api.Get, put: api.Update, copyOf: (*admissionregistrationv1.MutatingWebhookConfiguration).DeepCopy,
		entries: func(cfg *admissionregistrationv1.MutatingWebhookConfiguration, every bool) (*metav1.ObjectMeta, []Entry) {
			var out []Entry
			for i := range cfg.Webhooks {
				if w := &cfg.Webhooks[i]; every || w.Name == names.MutatingServiceWebhook {
					out = append(out, Entry{MatchConditions: &w.MatchConditions, FailurePolicy: &w.FailurePolicy, ClientConfig: &w.ClientConfig})
				}
			}
			return &cfg.ObjectMeta, out
		},
	}
}

// Validating is the ValidatingWebhookConfiguration n names and its
// webhook names.ValidatingServiceWebhook.
func Validating(client kubernetes.Interface, n Names) Configuration[*admissionregistrationv1.ValidatingWebhookConfiguration] {
	api := client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	return Configuration[*admissionregistrationv1.ValidatingWebhookConfiguration]{
		Kind: "ValidatingWebhookConfiguration", Name: n.Validating, Flag: "--validating-webhook-configuration", Webhook: names.ValidatingServiceWebhook,
		get: api.Get, put: api.Update, copyOf: (*admissionregistrationv1.ValidatingWebhookConfiguration).DeepCopy,
		entries: func(cfg *admissionregistrationv1.ValidatingWebhookConfiguration, every bool) (*metav1.ObjectMeta, []Entry) {
			var out []Entry
			for i := range cfg.Webhooks {
				if w := &cfg.Webhooks[i]; every || w.Name == names.ValidatingServiceWebhook {
					out = append(out, Entry{MatchConditions: &w.MatchConditions, FailurePolicy: &w.FailurePolicy, ClientConfig: &w.ClientConfig})
				}
			}
			return &cfg.ObjectMeta, out
		},
	}
}

// Edit changes the object's metadata and its Service webhook entries in
// place and reports whether it changed anything; an error stops the write.
type Edit func(meta *metav1.ObjectMeta, entries []Entry) (changed bool, err error)

// Update reads c, applies edit and writes the object back if edit changed
// it, and reports whether it wrote. Nothing else in the configuration
// changes: the update carries what was read, and a conflict is retried on
// a fresh read (edit runs again on it). A configuration without the
// Service webhook is an error naming the fix (but with EveryWebhook). A
// configuration that does not exist is an error apierrors.IsNotFound
// recognises.
func Update[C any](ctx context.Context, c Configuration[C], edit Edit) (bool, error) {
	if c.watched != nil && c.copyOf != nil {
		if cfg, err := c.watched(); err == nil {
			meta, entries := c.entries(c.copyOf(cfg), c.every)
			// An edit that fails or would change something is decided on
			// a fresh read below, with its errors named as always.
			if len(entries) > 0 || c.every {
				if changed, err := edit(meta, entries); err == nil && !changed {
					return false, nil
				}
			}
		}
	}
	written := false
	err := retry.RetryOnConflict(conflictBackoff, func() error {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		cfg, err := c.get(rctx, c.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("%s %s: %w", c.Kind, c.Name, err)
		}
		meta, entries := c.entries(cfg, c.every)
		if len(entries) == 0 && !c.every {
			return fmt.Errorf("%s %s has no webhook %s; apply manifests/base/webhook-configurations.yaml or fix %s", c.Kind, c.Name, c.Webhook, c.Flag)
		}
		changed, err := edit(meta, entries)
		if err != nil {
			return fmt.Errorf("%s %s, webhook %s: %w", c.Kind, c.Name, c.Webhook, err)
		}
		if !changed {
			return nil
		}
		manager := FieldManager
		if c.manager != "" {
			manager = c.manager
		}
		_, err = c.put(rctx, cfg, metav1.UpdateOptions{FieldManager: manager})
		written = err == nil
		return err
	})
	return written, err
}

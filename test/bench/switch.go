package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"clusterip-policy/test/e2e/framework"
)

// Switch puts config in force: it removes every webhook configuration and
// the policy of the others, waits until the apiserver calls no webhook and
// applies no policy (a verified none), creates config's objects and waits
// until the apiserver applies them. The apiserver learns of registrations
// through informers, so without the waits the first requests of a run
// could still see the previous configuration.
func (b *Bench) Switch(ctx context.Context, config string) error {
	if config == b.current {
		return nil
	}
	start := time.Now()
	if err := b.teardown(ctx); err != nil {
		return err
	}
	b.current = ""
	if err := b.waitNone(ctx); err != nil {
		return err
	}
	var err error
	switch config {
	case ConfigNone:
	case ConfigNop:
		err = b.register(ctx, b.nopConfigs, false)
	case ConfigOurs:
		err = b.register(ctx, b.ours, true)
	case ConfigOursOtherMutator:
		if err = b.register(ctx, b.ours, true); err == nil {
			err = b.registerOtherMutator(ctx)
		}
	case ConfigVAP:
		err = b.applyVAP(ctx)
	case ConfigBackstop:
		err = b.applyBackstop(ctx)
	case ConfigFloorStatic, ConfigFloorSingle:
		err = b.registerFloor(ctx, config == ConfigFloorStatic)
	default:
		err = fmt.Errorf("configuration %q: use one of %s", config, strings.Join(AllConfigs, ", "))
	}
	if err != nil {
		return fmt.Errorf("switch to %s: %w", config, err)
	}
	b.current, b.registration = config, b.registered(ctx)
	b.o.Logf("bench: %s in force (%s to switch)", config, time.Since(start).Round(time.Millisecond))
	return nil
}

// teardown deletes both pairs of webhook configurations and the policy
// with its binding, whichever exist.
func (b *Bench) teardown(ctx context.Context) error {
	ar := b.cs.AdmissionregistrationV1()
	var errs []error
	for _, wc := range []*framework.WebhookConfigurations{b.ours, b.nopConfigs} {
		errs = append(errs,
			ar.MutatingWebhookConfigurations().Delete(ctx, wc.Mutating.Name, metav1.DeleteOptions{}),
			ar.ValidatingWebhookConfigurations().Delete(ctx, wc.Validating.Name, metav1.DeleteOptions{}))
	}
	errs = append(errs,
		ar.MutatingWebhookConfigurations().Delete(ctx, otherMutatorName, metav1.DeleteOptions{}),
		ar.ValidatingAdmissionPolicyBindings().Delete(ctx, vapName, metav1.DeleteOptions{}),
		ar.ValidatingAdmissionPolicies().Delete(ctx, vapName, metav1.DeleteOptions{}))
	for i, err := range errs {
		if apierrors.IsNotFound(err) {
			errs[i] = nil
		}
	}
	errs = append(errs, b.deleteBackstop(ctx))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remove the admission configurations: %w", err)
	}
	return nil
}

// probeResult is what one dry-run create saw: the apiserver's counters
// meanwhile and the create's own error (nil when admitted).
type probeResult struct {
	Delta
	createErr error
}

// probe sends a server-side dry-run create in benchNamespace asking for ip.
// The error is about reading the counters; the create's is in the result.
func (b *Bench) probe(ctx context.Context, ip string) (probeResult, error) {
	before, err := b.snapshot(ctx)
	if err != nil {
		return probeResult{}, err
	}
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "probe-" + hex.EncodeToString(suffix), Namespace: benchNamespace},
		Spec:       corev1.ServiceSpec{ClusterIP: ip, Ports: []corev1.ServicePort{{Port: 80}}},
	}
	_, createErr := b.cs.CoreV1().Services(benchNamespace).Create(ctx, svc, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	after, err := b.snapshot(ctx)
	if err != nil {
		return probeResult{}, err
	}
	return probeResult{Delta: after.Sub(before), createErr: createErr}, nil
}

// waitFor calls check every pollInterval until it is done, switchTimeout
// passes or ctx ends; the last reason is in the error. Not fixtures.Wait,
// whose first calls come milliseconds apart: waitNone's "two clean probes
// in a row" means a configuration stayed out of force for a pollInterval.
func waitFor(ctx context.Context, what string, check func() (bool, string, error)) error {
	deadline := time.Now().Add(switchTimeout)
	var last string
	for {
		done, why, err := check()
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if done {
			return nil
		}
		last = why
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not reached within %s: %s", what, switchTimeout, last)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (%s)", what, ctx.Err(), last)
		case <-time.After(pollInterval):
		}
	}
}

// waitNone waits until two dry-run creates in a row of the DNS address
// from another Service succeed (so neither ours nor the policy denies)
// with no webhook call and no policy denial.
func (b *Bench) waitNone(ctx context.Context) error {
	clean := 0
	return waitFor(ctx, "no admission in force", func() (bool, string, error) {
		d, err := b.probe(ctx, dnsIP)
		if err != nil {
			return false, "", err
		}
		createErr := d.createErr
		if createErr != nil || d.AllWebhookRequests > 0 || d.VAPDenials > 0 {
			clean = 0
			return false, fmt.Sprintf("a dry-run create of %s got error %v after %.0f webhook calls and %.0f policy denials (is something recreating the configurations? %s)", dnsIP, createErr, d.AllWebhookRequests, d.VAPDenials, b.registered(ctx)), nil
		}
		clean++
		return clean >= 2, "one clean probe so far", nil
	})
}

// register creates wc (validating first: once the mutating webhook is
// called, both are) and waits until a dry-run create of a static address
// reaches both webhooks. For ours it also waits until ours denies the DNS
// address to another Service (its policy is loaded), and until the
// configurations stop changing: a webhook that manages its own
// matchConditions edits them after they appear, and the runs must measure
// what it settles on. The harness never writes them after the create.
func (b *Bench) register(ctx context.Context, wc *framework.WebhookConfigurations, ours bool) error {
	ar := b.cs.AdmissionregistrationV1()
	if _, err := ar.ValidatingWebhookConfigurations().Create(ctx, wc.Validating.DeepCopy(), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create ValidatingWebhookConfiguration %s: %w", wc.Validating.Name, err)
	}
	if _, err := ar.MutatingWebhookConfigurations().Create(ctx, wc.Mutating.DeepCopy(), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create MutatingWebhookConfiguration %s: %w", wc.Mutating.Name, err)
	}
	for range 5 {
		if err := waitFor(ctx, "both webhooks called", func() (bool, string, error) {
			d, err := b.probe(ctx, probeIP)
			if err != nil {
				return false, "", err
			}
			m, v := d.Requests[framework.MutatingWebhookName], d.Requests[framework.ValidatingWebhookName]
			if d.createErr != nil || m < 1 || v < 1 {
				return false, fmt.Sprintf("a dry-run create of %s got error %v after %.0f mutate and %.0f validate calls", probeIP, d.createErr, m, v), nil
			}
			return true, "", nil
		}); err != nil {
			return err
		}
		if !ours {
			return nil
		}
		if err := waitFor(ctx, "ours deciding with its policy", func() (bool, string, error) {
			d, err := b.probe(ctx, dnsIP)
			if err != nil {
				return false, "", err
			}
			if d.createErr != nil && strings.Contains(d.createErr.Error(), framework.MutatingWebhookName) && strings.Contains(d.createErr.Error(), "reserved") {
				return true, "", nil
			}
			return false, fmt.Sprintf("a dry-run create of %s by %s/probe got %v, want a denial by %s", dnsIP, benchNamespace, d.createErr, framework.MutatingWebhookName), nil
		}); err != nil {
			return err
		}
		if b.o.Knobs.ManagesConditions() {
			// The leader writes its condition once the configurations
			// exist; measure only once it has, in both Service webhooks.
			if err := waitFor(ctx, "ours writing its managed matchConditions", func() (bool, string, error) {
				got := b.registered(ctx)
				return strings.Count(got, managedCondition) >= 2, "registered: " + got, nil
			}); err != nil {
				return err
			}
		}
		before := b.registered(ctx)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
		after := b.registered(ctx)
		if after == before {
			b.o.Logf("bench: ours registered as %s", after)
			return nil
		}
		b.o.Logf("bench: the webhook configurations changed after registration: %s -> %s; probing again", before, after)
	}
	return errors.New("the webhook configurations kept changing for 5 probes: nothing stable to measure")
}

// registered describes the webhook configurations in force: names,
// resource versions and each webhook's matchConditions.
func (b *Bench) registered(ctx context.Context) string {
	ar := b.cs.AdmissionregistrationV1()
	var parts []string
	if l, err := ar.MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{}); err == nil {
		for _, c := range l.Items {
			for _, w := range c.Webhooks {
				var conds []string
				for _, m := range w.MatchConditions {
					conds = append(conds, m.Name)
				}
				parts = append(parts, fmt.Sprintf("mutating %s@%s %s %v", c.Name, c.ResourceVersion, w.Name, conds))
			}
		}
	}
	if l, err := ar.ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{}); err == nil {
		for _, c := range l.Items {
			for _, w := range c.Webhooks {
				var conds []string
				for _, m := range w.MatchConditions {
					conds = append(conds, m.Name)
				}
				parts = append(parts, fmt.Sprintf("validating %s@%s %s %v", c.Name, c.ResourceVersion, w.Name, conds))
			}
		}
	}
	if len(parts) == 0 {
		return "no webhook configurations"
	}
	return strings.Join(parts, "; ")
}

// applyVAP creates the policy and its binding and waits until the policy
// denies the DNS address to another Service.
func (b *Bench) applyVAP(ctx context.Context) error {
	ar := b.cs.AdmissionregistrationV1()
	policy, binding := vapObjects()
	if _, err := ar.ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create ValidatingAdmissionPolicy %s: %w", vapName, err)
	}
	if _, err := ar.ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create ValidatingAdmissionPolicyBinding %s: %w", vapName, err)
	}
	return waitFor(ctx, "the ValidatingAdmissionPolicy in force", func() (bool, string, error) {
		return b.vapDenies(ctx)
	})
}

// vapDenies reports whether the policy denies a dry-run create of the DNS
// address by another Service, as it does once in force.
func (b *Bench) vapDenies(ctx context.Context) (bool, string, error) {
	d, err := b.probe(ctx, dnsIP)
	if err != nil {
		return false, "", err
	}
	if d.createErr != nil && strings.Contains(d.createErr.Error(), vapName) && d.VAPDenials >= 1 {
		return true, "", nil
	}
	return false, fmt.Sprintf("a dry-run create of %s got %v after %.0f policy denials, want a denial by %s", dnsIP, d.createErr, d.VAPDenials, vapName), nil
}

// otherMutatorName is the configuration of the other mutating webhook of
// ConfigOursOtherMutator; it sorts after ours, so it runs after ours.
const otherMutatorName = "zz-bench-other-mutator"

// otherMutatorWebhook names its one webhook, so its calls are told apart
// from ours in the apiserver's counters.
const otherMutatorWebhook = "other-mutator.bench.example.com"

// registerOtherMutator registers the nop webhook's mutating endpoint for
// Service creates under another name, after ours, and waits until our
// leader has switched our mutating condition to sending every create and
// the configurations have stopped changing.
func (b *Bench) registerOtherMutator(ctx context.Context) error {
	other := b.nopConfigs.Mutating.DeepCopy()
	other.Name, other.ResourceVersion = otherMutatorName, ""
	other.Webhooks = other.Webhooks[:1]
	other.Webhooks[0].Name = otherMutatorWebhook
	other.Webhooks[0].MatchConditions = nil
	ar := b.cs.AdmissionregistrationV1()
	if _, err := ar.MutatingWebhookConfigurations().Create(ctx, other, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create MutatingWebhookConfiguration %s: %w", otherMutatorName, err)
	}
	if err := waitFor(ctx, "ours sending every create to its mutating webhook", func() (bool, string, error) {
		m, err := ar.MutatingWebhookConfigurations().Get(ctx, b.ours.Mutating.Name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		for _, w := range m.Webhooks {
			for _, c := range w.MatchConditions {
				if w.Name == framework.MutatingWebhookName && c.Name == managedCondition && c.Expression == "true" {
					return true, "", nil
				}
			}
		}
		return false, "registered: " + b.registered(ctx), nil
	}); err != nil {
		return err
	}
	// The apiservers load the changed configuration from their informers.
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(2 * time.Second):
	}
	return nil
}

// floorCondition is the condition of the floors: always false, so the
// webhook is never called and the apiserver's work is its matcher alone.
const floorCondition = "bench-floor-never"

// registerFloor registers the nop webhook's configurations (under the nop's
// names, so teardown removes them) with each Service webhook's
// matchConditions replaced by the static ones of manifests/base plus one
// that is false (static), or by the false one alone, and waits until a
// dry-run create is skipped by both Service webhooks' conditions and
// reaches neither.
func (b *Bench) registerFloor(ctx context.Context, static bool) error {
	m, v := b.nopConfigs.Mutating.DeepCopy(), b.nopConfigs.Validating.DeepCopy()
	never := admissionregistrationv1.MatchCondition{Name: floorCondition, Expression: "false"}
	floor := func(conds []admissionregistrationv1.MatchCondition) []admissionregistrationv1.MatchCondition {
		if !static {
			return []admissionregistrationv1.MatchCondition{never}
		}
		return append(slices.Clone(conds), never)
	}
	found := 0
	for i := range m.Webhooks {
		if m.Webhooks[i].Name == framework.MutatingWebhookName {
			m.Webhooks[i].MatchConditions = floor(m.Webhooks[i].MatchConditions)
			found++
		}
	}
	for i := range v.Webhooks {
		if v.Webhooks[i].Name == framework.ValidatingWebhookName {
			v.Webhooks[i].MatchConditions = floor(v.Webhooks[i].MatchConditions)
			found++
		}
	}
	if found != 2 {
		return fmt.Errorf("the webhook configurations of manifests/base have %d of the Service webhooks %s and %s; want both", found, framework.MutatingWebhookName, framework.ValidatingWebhookName)
	}
	ar := b.cs.AdmissionregistrationV1()
	if _, err := ar.ValidatingWebhookConfigurations().Create(ctx, v, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create ValidatingWebhookConfiguration %s: %w", v.Name, err)
	}
	if _, err := ar.MutatingWebhookConfigurations().Create(ctx, m, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create MutatingWebhookConfiguration %s: %w", m.Name, err)
	}
	return waitFor(ctx, "both Service webhooks skipping every create", func() (bool, string, error) {
		d, err := b.probe(ctx, probeIP)
		if err != nil {
			return false, "", err
		}
		ms, vs := d.Exclusions[framework.MutatingWebhookName], d.Exclusions[framework.ValidatingWebhookName]
		if d.createErr != nil || ms < 1 || vs < 1 || d.AllWebhookRequests > 0 {
			return false, fmt.Sprintf("a dry-run create of %s got error %v, skipped %.0f and %.0f times by the mutating and validating conditions, %.0f webhook calls", probeIP, d.createErr, ms, vs, d.AllWebhookRequests), nil
		}
		return true, "", nil
	})
}

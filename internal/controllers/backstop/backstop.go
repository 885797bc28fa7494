// Package backstop is the leader's loop that keeps the backstop written: the
// ValidatingAdmissionPolicies (and, where the apiserver serves it, the
// record MutatingAdmissionPolicy) that pkg/backstop compiles from the policy
// in force and the active ranges, with their bindings. The apiserver
// enforces them in-process, so the policy's door rules hold while the
// apiservers cannot reach a replica (unarmed, break-glass, a provider's
// firewall); docs/backstop.md.
//
// Lifting it on purpose: the bindings are created only while the Service
// webhook configurations exist. The break-glass command deletes the
// configurations and the backstop's bindings together, and the leader then
// leaves the bindings deleted (and says so: BackstopInForce False, reason
// Lifted) until the configurations are back. A tool that deletes only the
// configurations (a GitOps prune, before the rest) leaves the bindings,
// which stay in force and are kept current.
package backstop

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"clusterip-policy/internal/leader"
	"clusterip-policy/internal/names"
	"clusterip-policy/internal/poll"
	"clusterip-policy/internal/readiness"
	"clusterip-policy/internal/sharedinformers"
	"clusterip-policy/internal/webhookconfig"
	"clusterip-policy/pkg/allocview"
	"clusterip-policy/pkg/backstop"
)

const (
	// pollInterval is how often the leader compares the policy digest and
	// the active ranges with those it last compiled, in memory: a change
	// reaches the apiservers within it plus the writes (the webhook
	// reloads a changed policy at the same time, so the two disagree
	// only for that long).
	pollInterval = 100 * time.Millisecond
	// verifyInterval is how often it reads the configurations and the
	// bindings and writes everything again even when nothing changed, so
	// that a policy edited or a binding deleted by hand is put back
	// (an unchanged object costs the apiserver no write), and a lift or
	// the configurations' return is seen. In
	// between it makes no API call.
	verifyInterval = 30 * time.Second
	// absentInterval replaces it while the configurations do not exist
	// (an install that applies them after the pods, a lift): their
	// arrival is seen, and the bindings written, within it.
	absentInterval = 2 * time.Second
	// discoveryInterval is how often it asks whether the apiserver serves
	// MutatingAdmissionPolicy (an upgrade or a feature gate turns it on);
	// discoveryRetry, how soon it asks again after the question failed
	// (not every pass: that would be ten requests a second).
	discoveryInterval = time.Minute
	discoveryRetry    = 2 * time.Second
	// settle is how long after a write the leader waits before it reports
	// the backstop in force: the apiserver reloads admission policies
	// once a second (k8s.io/apiserver admission/plugin/policy/generic,
	// policyRefreshInterval), so until then it may enforce the older ones.
	settle = 1500 * time.Millisecond
	// maxBackoff bounds the wait between failed writes.
	maxBackoff = 30 * time.Second
	// writeTimeout bounds one object's write.
	writeTimeout = 10 * time.Second
	// FieldManager is the manager of everything it writes.
	FieldManager = "clusterip-policy-backstop"
	// Label marks every object it writes.
	Label = "clusterip-policy.io/backstop"
)

// Options are the backstop's flags.
type Options struct {
	// Enabled is --backstop.
	Enabled bool
	// Configurations are the Service webhook configurations, serve's one
	// value (webhookconfig.Names, which checks them): the bindings exist
	// while they do, and copy their namespaceSelector.
	Configurations webhookconfig.Names
	// Namespace is the webhook's own, which the Service webhooks never
	// judge: the bindings leave it out while no configuration says more.
	Namespace string
}

// AddFlags declares the backstop's flag: a switch, with nothing to check
// (the configurations' names are webhookconfig.Names', which checks them;
// the namespace is the Lease's).
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.Enabled, "backstop", false, "Keep the backstop written: ValidatingAdmissionPolicies (and, where the apiserver serves admissionregistration.k8s.io/v1 MutatingAdmissionPolicy, one that records the addresses a request names) compiled from the policy and the active ranges, which the apiserver enforces in-process whether or not it can reach the webhook: unapproved ServiceCIDRs and ones whose dynamic band covers another range's static band, addresses outside allowedCIDRs, reserved addresses and reserved ranges taken by others, and named addresses in a dynamic band (docs/backstop.md). One replica, elected with the Lease, writes them; the bindings exist while the Service webhook configurations do (the break-glass deletes both). Needs get, patch and delete on those policies and bindings by name (manifests/base/rbac.yaml). Off (the default; manifests/base and the chart turn it on): nothing of the policy holds while the apiservers cannot reach a replica.")
}

// Metrics are the backstop's.
type Metrics struct {
	enabled, inForce, lifted, rules prometheus.Gauge
	writes                          *prometheus.CounterVec
}

// NewMetrics registers the metrics in reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		enabled: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "clusterip_policy_backstop_enabled",
			Help: "1 on every replica running with --backstop, 0 otherwise: with clusterip_policy_backstop_in_force it tells an alert that the backstop is on but no leader has it in force.",
		}),
		inForce: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "clusterip_policy_backstop_in_force",
			Help: "1 on the leader while the backstop's admission policies and bindings are written and encode the policy in force; 0 while they are not (a write failing, lifted) and on other replicas.",
		}),
		lifted: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "clusterip_policy_backstop_lifted",
			Help: "1 on the leader while the backstop is lifted on purpose: its bindings and the Service webhook configurations were deleted (docs/emergency.md); 0 otherwise.",
		}),
		rules: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "clusterip_policy_backstop_rules",
			Help: "On the leader: the rules the backstop carries (resource and rule), as last written; 0 on other replicas.",
		}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "clusterip_policy_backstop_writes_total",
			Help: "Passes of the leader writing the backstop (result: written, failed).",
		}, []string{"result"}),
	}
	reg.MustRegister(m.enabled, m.inForce, m.lifted, m.rules, m.writes)
	for _, r := range []string{"written", "failed"} {
		m.writes.WithLabelValues(r)
	}
	return m
}

// Reporter is told what became of the leader's writes: the ClusterIPPolicy
// status (internal/controllers/policystatus) says whether the backstop is
// in force and what it encodes. Serve hands it to New.
type Reporter interface {
	BackstopInForce(policyDigest string, rules, left []string)
	BackstopLifted(message string)
	BackstopFailed(reason, message string)
}

// Keeper writes the backstop while its replica leads.
type Keeper struct {
	client kubernetes.Interface
	gate   *readiness.Gate
	o      Options
	log    logr.Logger
	m      *Metrics
	report Reporter
	now    func() time.Time
	// configurations are the term's watch of the two configurations,
	// which read uses; set by lead, for the term.
	webhooks *sharedinformers.WebhookConfigurations
}

// New keeps the backstop for the gate's policy and view, and tells report
// what became of its writes.
func New(client kubernetes.Interface, gate *readiness.Gate, o Options, log logr.Logger, m *Metrics, report Reporter) *Keeper {
	m.enabled.Set(1)
	return &Keeper{client: client, gate: gate, o: o, log: log, m: m, report: report, now: time.Now}
}

// Work keeps the backstop while this replica leads; at the term's end the
// gauges say nothing is kept here.
func (k *Keeper) Work() leader.Work {
	return leader.Term(k.log, "leading: writing the backstop's admission policies", nil, k.lead, func() {
		k.m.inForce.Set(0)
		k.m.lifted.Set(0)
		k.m.rules.Set(0)
	})
}

// state is what one pass read of the cluster.
type state struct {
	// registered: both Service webhook configurations exist.
	registered bool
	// selector is the validating Service webhook's namespaceSelector.
	selector *metav1.LabelSelector
	// bindings are the backstop's bindings that existed at the read, by
	// name, with their resourceVersion: write updates exactly those
	// versions, so it never brings back one deleted after the read.
	bindings map[string]string
}

// lead writes the backstop while ctx (the term) lasts: whenever the policy
// or the ranges change (polled every pollInterval), after a failure with
// backoff, and every verifyInterval regardless (absentInterval while the
// configurations do not exist).
func (k *Keeper) lead(ctx context.Context) {
	if err := k.watch(ctx); err != nil {
		// A bug of the wiring (no term factory, a second filter for a
		// type): nothing is written this term, and the log says why.
		if err := k.failed(ctx, "WriteFailed", err); err != nil {
			k.log.Error(err, "cannot watch the webhook configurations; the backstop is not written this term")
		}
		<-ctx.Done()
		return
	}
	var (
		lastKey   string // the inputs last written; "" after a failure
		reported  string // the inputs last reported in force
		lastWrite time.Time
		selector  = k.defaultSelector()
		every     = verifyInterval // between reads of the configurations
		discovery = k.newDiscovery()
	)
	pass := func(ctx context.Context) (time.Duration, error) {
		now := k.now()
		st, err := k.gate.ForLoop(now)
		if err != nil {
			return 0, nil // no policy loaded or no synced view yet
		}
		mutating := discovery.served(ctx, now)
		inputs := inputsKey(st.Env.Policy.Digest, st.Env.Ranges(), mutating)
		if inputs == lastKey && now.Sub(lastWrite) < every {
			return 0, nil
		}
		lastKey = ""
		cs, err := k.read(ctx)
		if err != nil {
			return 0, k.failed(ctx, "WriteFailed", fmt.Errorf("read the webhook configurations and the backstop's bindings: %w", err))
		}
		if cs.selector != nil {
			selector = cs.selector
		}
		set, err := backstop.Compile(backstop.Input{Policy: st.Env.Policy, Ranges: st.Env.Ranges(), NamespaceSelector: selector, Mutating: mutating,
			Labels: map[string]string{Label: "true", "app.kubernetes.io/name": names.AppName, "app.kubernetes.io/managed-by": FieldManager}})
		if err != nil {
			return 0, k.failed(ctx, "CompileFailed", err)
		}
		lifted, err := k.write(ctx, set, cs)
		if err != nil {
			return 0, k.failed(ctx, "WriteFailed", err)
		}
		k.m.writes.WithLabelValues("written").Inc()
		lastKey, lastWrite = inputs, now
		every = verifyInterval
		if !cs.registered {
			every = absentInterval
		}
		k.m.rules.Set(float64(len(set.Carried)))
		if lifted {
			reported = ""
			k.m.inForce.Set(0)
			k.m.lifted.Set(1)
			if k.report != nil {
				k.report.BackstopLifted("neither the Service webhook configurations nor the backstop's bindings exist (deleted by the break-glass, or not applied yet): the apiserver enforces nothing of the policy; the bindings are written again once the configurations exist (docs/emergency.md)")
			}
			return 0, nil
		}
		if inputs != reported {
			if !poll.Sleep(ctx, settle) {
				return 0, nil
			}
			reported = inputs
		}
		k.m.inForce.Set(1)
		k.m.lifted.Set(0)
		if k.report != nil {
			k.report.BackstopInForce(st.Env.Policy.Digest, carried(set), set.Left)
		}
		return 0, nil
	}
	(&poll.Loop{Pass: pass, Resync: pollInterval, Backoff: pollInterval, MaxBackoff: maxBackoff, Log: k.log,
		Failing: "cannot write the backstop; the apiserver enforces what was written before, or nothing of it", Recovered: "the backstop is written again"}).Run(ctx)
}

// inputsKey says what a compilation reads besides the configurations'
// namespaceSelector (read with them, every verifyInterval): the policy and
// the active and excluded ranges.
func inputsKey(policyDigest string, rs allocview.RangeSet, mutating bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %v %s %v", policyDigest, mutating, rs.Primary, rs.Configured)
	for _, r := range rs.Active {
		fmt.Fprintf(&b, " %s%v", r.Prefix, r.Allowed)
	}
	for _, e := range rs.Excluded {
		fmt.Fprintf(&b, " -%s", e.Range.Prefix)
	}
	return b.String()
}

// failed counts a failed pass and reports it; it returns the error, with
// its reason, for the loop to log (once while it lasts).
func (k *Keeper) failed(ctx context.Context, reason string, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	k.m.writes.WithLabelValues("failed").Inc()
	k.m.inForce.Set(0)
	if k.report != nil {
		k.report.BackstopFailed(reason, err.Error())
	}
	return poll.WithValues(err, "reason", reason)
}

func carried(s backstop.Set) []string {
	out := make([]string, 0, len(s.Carried))
	for _, c := range s.Carried {
		out = append(out, fmt.Sprintf("%s/%s=%s", c.Resource, c.Rule, c.Action))
	}
	return out
}

// defaultSelector is the Service webhooks' namespaceSelector as the
// manifests write it: every namespace but the webhook's own.
func (k *Keeper) defaultSelector() *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{k.o.Namespace},
	}}}
}

// discovery remembers whether the apiserver serves MutatingAdmissionPolicy:
// asked every discoveryInterval, again discoveryRetry after a failure (the
// last answer stands meanwhile; false before the first), the failure
// logged once while it lasts.
type discovery struct {
	ask    func(context.Context) (bool, error)
	errs   poll.ErrorLog
	answer bool
	next   time.Time
}

func (k *Keeper) newDiscovery() *discovery {
	return &discovery{ask: k.servesMutatingPolicies, errs: poll.ErrorLog{Log: k.log,
		Failing:   "cannot tell whether the apiserver serves MutatingAdmissionPolicy; the backstop carries static-ip-in-dynamic-band only where it does",
		Recovered: "the apiserver's discovery answers again"}}
}

// served is the answer at now, asking when it is due.
func (d *discovery) served(ctx context.Context, now time.Time) bool {
	if now.Before(d.next) {
		return d.answer
	}
	answer, err := d.ask(ctx)
	d.next = now.Add(discoveryRetry)
	if err == nil {
		d.answer, d.next = answer, now.Add(discoveryInterval)
	}
	if ctx.Err() == nil {
		d.errs.Report(err)
	}
	return d.answer
}

// servesMutatingPolicies reports whether the apiserver serves
// admissionregistration.k8s.io/v1 mutatingadmissionpolicies (GA and on by
// default from Kubernetes 1.36).
func (k *Keeper) servesMutatingPolicies(ctx context.Context) (bool, error) {
	res, err := k.client.Discovery().ServerResourcesForGroupVersion(admissionregistrationv1.SchemeGroupVersion.String())
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(res.APIResources, func(r metav1.APIResource) bool { return r.Name == "mutatingadmissionpolicies" }), ctx.Err()
}

// watch registers the term's watch of the two configurations (in the
// term's informer factory, which ctx carries) and starts it for the term.
// A bug of the wiring, it says so; the backstop is then not written.
func (k *Keeper) watch(ctx context.Context) error {
	var err error
	k.webhooks, err = sharedinformers.TermConfigurations(ctx, "backstop", sharedinformers.FirstList)
	return err
}

// read takes the two configurations from the term's watch of them, and
// gets the backstop's bindings by name (the RBAC of the webhook grants
// these names only). A configuration the watch saw a moment late is
// safe: a binding is created only after a fresh read (configurations)
// finds both there.
func (k *Keeper) read(ctx context.Context) (state, error) {
	var s state
	registered, vwc, err := k.watched()
	if err != nil {
		return s, err
	}
	if vwc != nil {
		for _, w := range vwc.Webhooks {
			if w.Name == names.ValidatingServiceWebhook && w.NamespaceSelector != nil {
				s.selector = w.NamespaceSelector.DeepCopy()
			}
		}
	}
	s.registered = registered
	s.bindings = map[string]string{}
	for _, n := range backstop.Names() {
		if n == backstop.RecordName {
			continue // a MutatingAdmissionPolicyBinding, read where written
		}
		b, err := k.client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, n, metav1.GetOptions{})
		switch {
		case err == nil:
			s.bindings[n] = b.ResourceVersion
		case !apierrors.IsNotFound(err):
			return s, err
		}
	}
	return s, nil
}

// write applies set: the policies (server-side apply), then the bindings
// while the configurations exist, or while the bindings exist themselves
// (the configurations deleted alone, as a GitOps prune does: still in
// force), each updated at the version s read or created; then it deletes
// what set no longer holds. When neither the
// configurations nor a binding exists, the backstop is lifted (the
// break-glass, or an uninstall's pre-delete hook): it deletes the rest of
// its objects and writes nothing until the configurations are back.
func (k *Keeper) write(ctx context.Context, set backstop.Set, s state) (lifted bool, err error) {
	ar := k.client.AdmissionregistrationV1()
	if !s.registered && len(s.bindings) == 0 {
		return true, deleteAll(ctx, k.client)
	}
	keep := map[string]bool{}
	for i := range set.Policies {
		p := &set.Policies[i]
		keep[p.Name] = true
		if err := apply(ctx, ar.ValidatingAdmissionPolicies().Patch, p.Name, p); err != nil {
			return false, err
		}
	}
	for i := range set.MutatingPolicies {
		p := &set.MutatingPolicies[i]
		keep[p.Name] = true
		if err := apply(ctx, ar.MutatingAdmissionPolicies().Patch, p.Name, p); err != nil {
			return false, err
		}
	}
	// The break-glass deletes the configurations, then the bindings, at
	// any moment, also between this pass's read and its writes; a write
	// must never bring back what it deleted. A binding that existed at
	// the read is updated at the version read: gone since, it stays gone
	// (NotFound), changed since, the next pass writes it. A new one is
	// created only while the configurations exist, and withdrawn when
	// they are found gone right after.
	var created []string
	for i := range set.Bindings {
		b := &set.Bindings[i]
		if rv, ok := s.bindings[b.Name]; ok {
			if err := updateAt(ctx, k.client, b, rv); err != nil {
				return false, err
			}
			continue
		}
		if !s.registered {
			continue // never created while the configurations are gone
		}
		// Created by an apply: RBAC authorizes it as a create of this
		// name (a POST carries none, and the grant is by name).
		if err := apply(ctx, ar.ValidatingAdmissionPolicyBindings().Patch, b.Name, b); err != nil {
			return false, err
		}
		created = append(created, b.Name)
	}
	if len(created) > 0 {
		if still, _, err := k.configurations(ctx); err != nil || !still {
			for _, n := range created {
				if derr := deleteBinding(ctx, k.client, n); derr != nil {
					return false, derr
				}
			}
			if err != nil {
				return false, fmt.Errorf("created bindings %s, then could not tell whether the configurations still exist (withdrawn): %w", strings.Join(created, ", "), err)
			}
			return false, nil // the next pass reads the new state
		}
	}
	for i := range set.MutatingBindings {
		if b := &set.MutatingBindings[i]; s.registered {
			if err := apply(ctx, ar.MutatingAdmissionPolicyBindings().Patch, b.Name, b); err != nil {
				return false, err
			}
		}
	}
	for _, n := range backstop.Names() {
		if !keep[n] {
			if err := deleteNamed(ctx, k.client, n); err != nil {
				return false, err
			}
		}
	}
	return false, nil
}

// watched says whether both Service webhook configurations exist, as the
// term's watch of them last saw, and returns the validating one when it
// does (the watch's object: read, never changed).
func (k *Keeper) watched() (bool, *admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	return registration(
		func() error { _, err := k.webhooks.Mutating(); return err },
		k.webhooks.Validating)
}

// configurations says whether both Service webhook configurations exist,
// and returns the validating one when it does: a fresh read, right after
// this pass created a binding, so that a break-glass between the watch's
// news and the create withdraws it.
func (k *Keeper) configurations(ctx context.Context) (bool, *admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	ar := k.client.AdmissionregistrationV1()
	return registration(
		func() error {
			_, err := ar.MutatingWebhookConfigurations().Get(ctx, k.o.Configurations.Mutating, metav1.GetOptions{})
			return err
		},
		func() (*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
			return ar.ValidatingWebhookConfigurations().Get(ctx, k.o.Configurations.Validating, metav1.GetOptions{})
		})
}

// registration says whether both configurations exist from one read of
// each (the watch's, or fresh GETs), and returns the validating one when
// it exists. NotFound is an answer; any other error is the caller's.
func registration(mutating func() error, validating func() (*admissionregistrationv1.ValidatingWebhookConfiguration, error)) (bool, *admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	err := mutating()
	mutatingThere := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return false, nil, err
	}
	vwc, err := validating()
	switch {
	case apierrors.IsNotFound(err):
		return false, nil, nil
	case err != nil:
		return false, nil, err
	}
	return mutatingThere, vwc, nil
}

// updateAt writes binding b over the version rv that was read: it never
// creates it again once deleted. A conflict (changed since the read) is
// an error, so the loop reads again soon and writes it then.
func updateAt(ctx context.Context, client kubernetes.Interface, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding, rv string) error {
	u := b.DeepCopy()
	u.ResourceVersion = rv
	uctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	_, err := client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Update(uctx, u, metav1.UpdateOptions{FieldManager: FieldManager})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("update %s: %w", b.Name, err)
	}
	return nil
}

// deleteBinding deletes the backstop's ValidatingAdmissionPolicyBinding n.
func deleteBinding(ctx context.Context, client kubernetes.Interface, n string) error {
	dctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	if err := client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(dctx, n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete %s: %w", n, err)
	}
	return nil
}

// deleteAll deletes every object of the backstop, bindings first.
func deleteAll(ctx context.Context, client kubernetes.Interface) error {
	for _, n := range backstop.Names() {
		if err := deleteNamed(ctx, client, n); err != nil {
			return err
		}
	}
	return nil
}

// deleteNamed deletes the backstop's binding and policy named n, the
// binding first so that no binding ever names a missing policy. A
// resource the apiserver does not serve (MutatingAdmissionPolicy before
// 1.36) holds nothing to delete.
func deleteNamed(ctx context.Context, client kubernetes.Interface, n string) error {
	ar := client.AdmissionregistrationV1()
	dels := []func(context.Context, string, metav1.DeleteOptions) error{ar.ValidatingAdmissionPolicyBindings().Delete, ar.ValidatingAdmissionPolicies().Delete}
	if n == backstop.RecordName {
		dels = []func(context.Context, string, metav1.DeleteOptions) error{ar.MutatingAdmissionPolicyBindings().Delete, ar.MutatingAdmissionPolicies().Delete}
	}
	for _, del := range dels {
		dctx, cancel := context.WithTimeout(ctx, writeTimeout)
		err := del(dctx, n, metav1.DeleteOptions{})
		cancel()
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsMethodNotSupported(err) {
			return fmt.Errorf("delete %s: %w", n, err)
		}
	}
	return nil
}

// apply server-side applies obj (a typed object with apiVersion and kind
// set) through a typed client's Patch, as FieldManager, taking over the
// fields another manager set (a hand edit is undone).
func apply[T any](ctx context.Context, patch func(context.Context, string, types.PatchType, []byte, metav1.PatchOptions, ...string) (T, error), name string, obj any) error {
	data, err := json.Marshal(obj)
	if err != nil {
		return fmt.Errorf("render %s: %w", name, err)
	}
	pctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	force := true
	if _, err := patch(pctx, name, types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: FieldManager, Force: &force}); err != nil {
		return fmt.Errorf("apply %s: %w", name, err)
	}
	return nil
}

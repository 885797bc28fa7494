package matchconditions

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	admissionregistrationv1alpha1 "k8s.io/api/admissionregistration/v1alpha1"
	admissionregistrationv1beta1 "k8s.io/api/admissionregistration/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"clusterip-policy/internal/names"
	"clusterip-policy/internal/poll"
	"clusterip-policy/internal/sharedinformers"
	"clusterip-policy/pkg/backstop"
	"clusterip-policy/pkg/matchconditions"
)

// mutatorWatch tells the leader whether mutating admission other than ours
// can act on Service CREATEs (pkg/matchconditions/mutators.go says why that
// matters): every MutatingWebhookConfiguration, and every
// MutatingAdmissionPolicy where the apiserver serves them, read through
// informers so that a new one is seen within milliseconds of its creation.
// Needs list and watch on both (manifests/base/rbac.yaml). Until both are
// read (at the start of a term, while RBAC refuses them, while discovery
// fails) it answers "unknown", and the leader sends every create.
type mutatorWatch struct {
	client    kubernetes.Interface
	ourConfig string // our MutatingWebhookConfiguration, whose Service webhook is left out
	log       logr.Logger

	mu   sync.Mutex
	read func() ([]matchconditions.Mutator, bool) // nil until the informers run
}

// mapRediscoverInterval is how often the leader asks discovery again which
// version of MutatingAdmissionPolicy the apiservers serve: it changes only
// with an apiserver upgrade or a feature gate.
const mapRediscoverInterval = time.Minute

// mutatorState is what the leader acts on.
type mutatorState struct {
	known bool     // false: the mutators cannot be read (yet); act as if some could
	count int      // other mutating admissions that select Service CREATEs
	names []string // the first few of them, for the log
}

func (w *mutatorWatch) state() mutatorState {
	w.mu.Lock()
	read := w.read
	w.mu.Unlock()
	if read == nil {
		return mutatorState{}
	}
	ms, ok := read()
	if !ok {
		return mutatorState{}
	}
	n, names := matchconditions.ServiceMutators(ms)
	return mutatorState{known: true, count: n, names: names}
}

// run keeps the informers going until ctx (the leadership) ends, starting
// them anew when the served MutatingAdmissionPolicy version changes.
func (w *mutatorWatch) run(ctx context.Context) {
	defer w.set(nil)
	webhooks, err := sharedinformers.TermConfigurations(ctx, "match-conditions", 0)
	if err != nil {
		// A bug of the wiring: the mutators stay unknown, so every create
		// is sent to the webhook, and the log says why.
		w.log.Error(err, "cannot watch the MutatingWebhookConfigurations; every Service create is sent to the mutating webhook")
		return
	}
	version, stop := "", func() {}
	defer func() { stop() }()
	(&poll.Loop{
		Pass: func(ctx context.Context) (time.Duration, error) {
			v, err := w.policyVersion(ctx)
			switch {
			case err != nil && w.started():
				return 0, nil // the informers read on; asked again at the next rediscovery
			case err != nil:
				stop()
				version, stop = "", func() {}
				w.set(nil)
				return 0, err
			case v == version && w.started():
				return 0, nil
			case w.started():
				w.log.Info("the served MutatingAdmissionPolicy version changed; reading them anew", "was", version, "now", v)
			}
			stop()
			tctx, cancel := context.WithCancel(ctx)
			version, stop = v, cancel
			w.set(w.start(tctx, v, webhooks))
			return 0, nil
		},
		Resync: mapRediscoverInterval, Backoff: mutatorRetry, MaxBackoff: mutatorRetry,
		Log:     w.log,
		Failing: "cannot tell which MutatingAdmissionPolicy version the apiservers serve; every Service create is sent to the mutating webhook meanwhile",
	}).Run(ctx)
}

// mutatorRetry is how soon a failed discovery is tried again.
const mutatorRetry = 5 * time.Second

// started reports whether the informers run.
func (w *mutatorWatch) started() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.read != nil
}

func (w *mutatorWatch) set(read func() ([]matchconditions.Mutator, bool)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.read = read
}

// policyVersion returns the newest admissionregistration.k8s.io version
// that serves mutatingadmissionpolicies, or "" when none does (before
// Kubernetes 1.32, or the feature off: then no such policy can run).
func (w *mutatorWatch) policyVersion(ctx context.Context) (string, error) {
	for _, v := range []string{"v1", "v1beta1", "v1alpha1"} {
		res, err := w.client.Discovery().ServerResourcesForGroupVersion(admissionregistrationv1.GroupName + "/" + v)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("discovery of %s/%s: %w", admissionregistrationv1.GroupName, v, err)
		}
		if slices.ContainsFunc(res.APIResources, func(r metav1.APIResource) bool { return r.Name == "mutatingadmissionpolicies" }) {
			return v, nil
		}
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
	}
	return "", nil
}

// start runs the informers until ctx ends and returns what reads them.
// The MutatingWebhookConfigurations are webhooks, the term's watch, which
// lists every one when the conditions are managed and serves the other
// leader loops ours from the same list and watch. The
// MutatingAdmissionPolicies, read by no other loop, are a factory of their
// own, started anew for the version served: a term's factory cannot stop
// one informer of a version no longer served.
func (w *mutatorWatch) start(ctx context.Context, policyVersion string, webhooks *sharedinformers.WebhookConfigurations) func() ([]matchconditions.Mutator, bool) {
	f := informers.NewSharedInformerFactory(w.client, 0)
	synced := []cache.InformerSynced{webhooks.Synced}
	var policies func() ([]matchconditions.Mutator, error)
	switch policyVersion {
	case "v1":
		l := f.Admissionregistration().V1().MutatingAdmissionPolicies()
		synced = append(synced, l.Informer().HasSynced)
		policies = listPolicies(l.Lister().List, func(p *admissionregistrationv1.MutatingAdmissionPolicy) (string, []admissionregistrationv1.NamedRuleWithOperations, bool) {
			if p.Spec.MatchConstraints == nil {
				return p.Name, nil, false
			}
			return p.Name, p.Spec.MatchConstraints.ResourceRules, true
		})
	case "v1beta1":
		l := f.Admissionregistration().V1beta1().MutatingAdmissionPolicies()
		synced = append(synced, l.Informer().HasSynced)
		policies = listPolicies(l.Lister().List, func(p *admissionregistrationv1beta1.MutatingAdmissionPolicy) (string, []admissionregistrationv1beta1.NamedRuleWithOperations, bool) {
			if p.Spec.MatchConstraints == nil {
				return p.Name, nil, false
			}
			return p.Name, p.Spec.MatchConstraints.ResourceRules, true
		})
	case "v1alpha1":
		l := f.Admissionregistration().V1alpha1().MutatingAdmissionPolicies()
		synced = append(synced, l.Informer().HasSynced)
		policies = listPolicies(l.Lister().List, func(p *admissionregistrationv1alpha1.MutatingAdmissionPolicy) (string, []admissionregistrationv1alpha1.NamedRuleWithOperations, bool) {
			if p.Spec.MatchConstraints == nil {
				return p.Name, nil, false
			}
			return p.Name, p.Spec.MatchConstraints.ResourceRules, true
		})
	}
	f.Start(ctx.Done())
	return func() ([]matchconditions.Mutator, bool) {
		for _, s := range synced {
			if !s() {
				return nil, false
			}
		}
		cfgs, err := webhooks.EveryMutating()
		if err != nil {
			return nil, false
		}
		ms := matchconditions.WebhookMutators(cfgs, w.ourConfig, names.MutatingServiceWebhook)
		if policies != nil {
			ps, err := policies()
			if err != nil {
				return nil, false
			}
			ms = append(ms, ps...)
		}
		return ms, true
	}
}

// namedRule is NamedRuleWithOperations of any served version: they all
// embed admissionregistration/v1's RuleWithOperations.
type namedRule interface {
	admissionregistrationv1.NamedRuleWithOperations | admissionregistrationv1beta1.NamedRuleWithOperations | admissionregistrationv1alpha1.NamedRuleWithOperations
}

// listPolicies reads MutatingAdmissionPolicies of one version as Mutators.
// A policy without matchConstraints (which the apiserver requires) is
// taken to match everything.
func listPolicies[P any, R namedRule](list func(labels.Selector) ([]P, error), rulesOf func(P) (string, []R, bool)) func() ([]matchconditions.Mutator, error) {
	everything := admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*"}},
	}
	return func() ([]matchconditions.Mutator, error) {
		ps, err := list(labels.Everything())
		if err != nil {
			return nil, err
		}
		out := make([]matchconditions.Mutator, 0, len(ps))
		for _, p := range ps {
			name, rules, constrained := rulesOf(p)
			if name == backstop.RecordName {
				continue // ours: it writes an annotation, never an address
			}
			m := matchconditions.Mutator{Name: "MutatingAdmissionPolicy " + name}
			if !constrained {
				m.Rules = []admissionregistrationv1.RuleWithOperations{everything}
			}
			for _, r := range rules {
				m.Rules = append(m.Rules, ruleOf(r))
			}
			out = append(out, m)
		}
		return out, nil
	}
}

func ruleOf[R namedRule](r R) admissionregistrationv1.RuleWithOperations {
	switch r := any(r).(type) {
	case admissionregistrationv1.NamedRuleWithOperations:
		return r.RuleWithOperations
	case admissionregistrationv1beta1.NamedRuleWithOperations:
		return r.RuleWithOperations
	case admissionregistrationv1alpha1.NamedRuleWithOperations:
		return r.RuleWithOperations
	}
	return admissionregistrationv1.RuleWithOperations{}
}

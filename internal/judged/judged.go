// Package judged says which namespaces the Service webhooks are called
// for: the one source of truth for "judged here" that the leader's holds
// and periodic audit skip by (docs/design.md, "Which namespaces are judged
// here"). It reads the namespaceSelector of both Service webhooks from the
// live webhook configurations, as the apiservers use them, and the labels
// of the namespaces; nothing is configured twice. A leaf: it imports
// nothing of the application but names and poll.
package judged

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"clusterip-policy/internal/names"
	"clusterip-policy/internal/poll"
	"clusterip-policy/internal/sharedinformers"
)

// ReadInterval is how often the leader re-reads the two webhook
// configurations from the term's watch of them (memory, no API call): a
// changed namespaceSelector reaches the holds and the audit within it. A
// namespace's labels arrive by watch, at once.
const ReadInterval = 5 * time.Second

// ErrNotKnown is returned until both configurations have been read and the
// namespaces listed once: a loop that skips by namespace waits rather than
// act on a guess.
var ErrNotKnown = errors.New("the namespaces the Service webhooks are called for are not known yet")

// Source is what the leader's loops ask before each pass.
type Source interface {
	// Current is the judged namespaces now, or an error (wrapping
	// ErrNotKnown) while they are not known.
	Current() (Namespaces, error)
}

// Namespaces is one answer of a Source: which namespaces are judged.
type Namespaces struct {
	excluded  []string          // never judged whatever the configurations say (the webhook's own)
	selectors []labels.Selector // each Service webhook's namespaceSelector; all must match
	labelsOf  func(namespace string) (map[string]string, bool)
}

// Judged reports whether the apiservers call both Service webhooks for a
// Service in namespace: it is not excluded, and the namespace's labels
// match the namespaceSelector of the mutating and of the validating
// Service webhook. A namespace that does not exist (yet) is matched by the
// one label the apiserver will give it, kubernetes.io/metadata.name; once
// it exists its labels decide.
func (n Namespaces) Judged(namespace string) bool {
	if slices.Contains(n.excluded, namespace) {
		return false
	}
	var l map[string]string
	ok := false
	if n.labelsOf != nil {
		l, ok = n.labelsOf(namespace)
	}
	if !ok {
		l = map[string]string{corev1.LabelMetadataName: namespace}
	}
	for _, s := range n.selectors {
		if !s.Matches(labels.Set(l)) {
			return false
		}
	}
	return true
}

// Skipped is !Judged, the shape the loops filter with.
func (n Namespaces) Skipped(namespace string) bool { return !n.Judged(namespace) }

// Names is a fixed Source: every namespace is judged but excluded. For
// tests, and for a caller with no configurations to read.
func Names(excluded ...string) Source { return fixed{Namespaces{excluded: excluded}} }

type fixed struct{ n Namespaces }

func (f fixed) Current() (Namespaces, error) { return f.n, nil }

// Scope is the Source the leader runs: Run reads the configurations while
// the term lasts, from the term's one watch of them
// (sharedinformers.WebhookConfigurations). The namespaces' labels are the
// replica's own watch (Labels), which every replica keeps for the reserved
// ranges: one watch of the Namespaces per replica, not a second one for
// the leader.
type Scope struct {
	namespaces *Labels
	mutating   string // MutatingWebhookConfiguration name, for the messages
	validating string // ValidatingWebhookConfiguration name
	excluded   []string
	interval   time.Duration // ReadInterval; shorter in tests
	log        logr.Logger

	cfgs *sharedinformers.WebhookConfigurations // the term's; set by Run

	mu        sync.Mutex
	selectors []labels.Selector // nil until read
	described string            // the selectors as read, for the log
	listed    bool              // the namespaces were listed in this term
	err       error             // why the selectors are not known (nil when they are)
	warned    map[string]bool
}

// NewScope reads the namespaceSelector of the Service webhooks in the
// configurations named mutating and validating (the
// --mutating-webhook-configuration and --validating-webhook-configuration
// flags, which the term's informer factory watches); excluded are never
// judged (the Lease namespace: the configurations exclude the webhook's
// own). namespaces is the replica's watch of the namespaces' labels, run
// by the caller.
func NewScope(namespaces *Labels, mutating, validating string, excluded []string, log logr.Logger) *Scope {
	return &Scope{namespaces: namespaces, mutating: mutating, validating: validating, excluded: excluded, interval: ReadInterval, log: log}
}

// Current implements Source.
func (s *Scope) Current() (Namespaces, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.selectors == nil || !s.listed {
		if s.err != nil {
			return Namespaces{}, fmt.Errorf("%w: %w", ErrNotKnown, s.err)
		}
		return Namespaces{}, ErrNotKnown
	}
	return Namespaces{excluded: s.excluded, selectors: s.selectors, labelsOf: s.namespaces.Of}, nil
}

// Run keeps the answer current until ctx ends (the leader's term, whose
// informer factory ctx carries), then forgets it: a replica that does not
// lead knows nothing.
func (s *Scope) Run(ctx context.Context) {
	defer func() {
		s.mu.Lock()
		s.selectors, s.described, s.listed, s.err, s.warned = nil, "", false, nil, nil
		s.mu.Unlock()
	}()
	// The first list takes a round trip; one that does not come (RBAC,
	// the apiserver away) is reported by the reads after firstList.
	cfgs, err := sharedinformers.TermConfigurations(ctx, "judged", sharedinformers.FirstList)
	if err != nil {
		// A bug of the wiring, not of the cluster: the holds and the audit
		// wait, and the log says why.
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
		s.log.Error(err, "cannot read which namespaces the Service webhooks are called for; the holds and the periodic audit wait")
		<-ctx.Done()
		return
	}
	s.cfgs = cfgs
	listed := false
	pass := func(ctx context.Context) (time.Duration, error) {
		err := s.read()
		if !listed {
			// The configurations are read while the namespaces are listed.
			if !s.namespaces.WaitForSync(ctx) {
				s.log.Info("stopped before the namespaces were listed")
				return 0, nil
			}
			s.mu.Lock()
			s.listed, listed = true, true
			s.mu.Unlock()
		}
		s.warn()
		return 0, err
	}
	(&poll.Loop{Pass: pass, Resync: s.interval, Log: s.log,
		Failing: "cannot read which namespaces the Service webhooks are called for; the holds and the periodic audit wait while it is not known (logged again when the error changes)"}).Run(ctx)
}

// read fetches both configurations once. A configuration that does not
// exist calls the webhook for nothing, and nothing is installed to say
// otherwise (the binary run without the manifests, a configuration being
// re-created): every namespace but the excluded ones counts, as before the
// namespaceSelector was read, and the log says so. A configuration that
// lacks its Service webhook makes the answer unknown (the loops wait);
// another failure (the apiserver unreachable a moment, RBAC) keeps the
// last answer, or leaves it unknown if there was none; its error is the
// loop's to log. The answer read is logged when it changes.
func (s *Scope) read() error {
	sels, desc, err := s.fetch()
	if apierrors.IsNotFound(err) {
		sels, desc, err = []labels.Selector{}, "none: "+err.Error()+"; every namespace but the webhook's own counts", nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.err = err
		if errors.Is(err, errNoServiceWebhook) {
			s.selectors, s.described = nil, ""
		}
		return poll.WithValues(err, "keptLastAnswer", s.selectors != nil)
	}
	if s.err != nil || desc != s.described {
		s.log.Info("namespaces judged here: those the Service webhooks' namespaceSelector selects; the holds and the periodic audit skip the others", "namespaceSelector", desc, "alwaysSkipped", s.excluded)
	}
	s.selectors, s.described, s.err = sels, desc, nil
	return nil
}

var errNoServiceWebhook = errors.New("no such Service webhook")

func (s *Scope) fetch() ([]labels.Selector, string, error) {
	m, err := s.cfgs.Mutating()
	if err != nil {
		return nil, "", fmt.Errorf("read MutatingWebhookConfiguration %s (--mutating-webhook-configuration): %w", s.mutating, err)
	}
	v, err := s.cfgs.Validating()
	if err != nil {
		return nil, "", fmt.Errorf("read ValidatingWebhookConfiguration %s (--validating-webhook-configuration): %w", s.validating, err)
	}
	var ms, vs *metav1.LabelSelector
	found := 0
	for i := range m.Webhooks {
		if m.Webhooks[i].Name == names.MutatingServiceWebhook {
			ms, found = m.Webhooks[i].NamespaceSelector, found+1
		}
	}
	for i := range v.Webhooks {
		if v.Webhooks[i].Name == names.ValidatingServiceWebhook {
			vs, found = v.Webhooks[i].NamespaceSelector, found+1
		}
	}
	if found != 2 {
		return nil, "", fmt.Errorf("%w: MutatingWebhookConfiguration %s needs webhook %s and ValidatingWebhookConfiguration %s needs webhook %s", errNoServiceWebhook, s.mutating, names.MutatingServiceWebhook, s.validating, names.ValidatingServiceWebhook)
	}
	return Selectors(ms, vs)
}

// Selectors parses the namespaceSelector of the mutating and the
// validating Service webhook as the apiserver does (a nil selector, which
// the apiserver defaults to {}, selects every namespace). It returns them
// and a description for the log: one selector when the two are equal.
func Selectors(mutating, validating *metav1.LabelSelector) ([]labels.Selector, string, error) {
	var out []labels.Selector
	var descs []string
	for _, ls := range []*metav1.LabelSelector{mutating, validating} {
		if ls == nil {
			ls = &metav1.LabelSelector{}
		}
		sel, err := metav1.LabelSelectorAsSelector(ls)
		if err != nil {
			return nil, "", fmt.Errorf("a Service webhook's namespaceSelector: %w", err)
		}
		out = append(out, sel)
		descs = append(descs, sel.String())
	}
	if descs[0] == descs[1] {
		return out[:1], descs[0], nil
	}
	return out, fmt.Sprintf("mutating: %s; validating: %s", descs[0], descs[1]), nil
}

// mustStayJudged are the namespaces the chart and the manifests' checks
// refuse to exclude. A label added later cannot be checked when the
// configurations are rendered; the leader says so in its log.
var mustStayJudged = []string{"kube-system", "default"}

// warn logs, once per change, when a namespace that must stay judged is
// not: its Services (kube-dns, default/kubernetes) are then neither
// checked, held for nor audited.
func (s *Scope) warn() {
	n, err := s.Current()
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.warned == nil {
		s.warned = map[string]bool{}
	}
	for _, ns := range mustStayJudged {
		skipped := n.Skipped(ns)
		if skipped && !s.warned[ns] {
			s.log.Error(nil, "the Service webhooks are not called for namespace "+ns+" (its labels do not match their namespaceSelector): its Services are not checked, and reservations of its Services are neither held nor audited; remove the label or change webhook.namespaceSelector", "namespace", ns, "namespaceSelector", s.described)
		}
		s.warned[ns] = skipped
	}
}

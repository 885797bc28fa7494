package server

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"clusterip-policy/internal/sharedinformers"
	"clusterip-policy/test/fixtures"
)

// With every feature on, the replica's informer factory and a leader
// term's hold one informer per type, with the filter each reader agreed
// on: a feature that asked for a type with another filter would be refused
// (Conflicts), and a new informer of the leader's shows up here. The fake
// client stands in for the apiserver; TestOneWatchPerResourceWithEveryRole
// (test/e2e) counts the watches a real one serves.
func TestOneInformerPerTypeWithEveryRole(t *testing.T) {
	c := testHostContext(t, prometheus.NewRegistry(), everyRoleArgs...)
	if _, err := buildCore(c, nil); err != nil {
		t.Fatal(err)
	}
	h, err := buildFeatures(c)
	if err != nil {
		t.Fatal(err)
	}
	wantReplica := []string{
		"IPAddress: labels ipaddress.kubernetes.io/managed-by=clusterip-policy.io (holds)",
		"Namespace: every object (namespace labels)",
		"Secret: namespace " + c.o.certs.Namespace + ", fields metadata.name=" + c.o.certs.Secret + " (serving certificate)",
	}
	if got := c.informers.Registered(); !slices.Equal(got, wantReplica) {
		t.Errorf("the replica's informers:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantReplica, "\n"))
	}

	// One term: every Work registers what it reads in the term's factory.
	term := sharedinformers.New(c.client, sharedinformers.Configurations{Mutating: c.o.configurations.Mutating, Validating: c.o.configurations.Validating, EveryMutating: c.o.conditions.Manage})
	ctx, cancel := context.WithCancel(sharedinformers.NewContext(context.Background(), term))
	done := make(chan struct{}, len(h.works))
	for _, w := range h.works {
		go func() { defer func() { done <- struct{}{} }(); w(ctx) }()
	}
	wantTerm := []string{
		"MutatingWebhookConfiguration: every object",
		"Secret: namespace " + c.o.certs.Namespace + ", fields metadata.name=" + c.o.certs.CASecret + " (certificates)",
		"ValidatingWebhookConfiguration: fields metadata.name=" + c.o.configurations.Validating,
	}
	var got []string
	fixtures.Eventually(t, "every Work to register its informers", 30*time.Second, func() bool {
		got = got[:0]
		for _, r := range term.Registered() {
			// The configurations' first reader is whichever Work started first.
			r, _, _ = strings.Cut(r, " (")
			if strings.HasPrefix(r, "Secret") {
				r += " (certificates)"
			}
			got = append(got, r)
		}
		return len(got) >= len(wantTerm)
	})
	cancel()
	for range h.works {
		<-done
	}
	term.Shutdown()
	if !slices.Equal(got, wantTerm) {
		t.Errorf("a term's informers:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantTerm, "\n"))
	}
	for _, f := range []*sharedinformers.Factory{c.informers, term} {
		for _, err := range f.Conflicts() {
			t.Errorf("refused: %v", err)
		}
	}
}

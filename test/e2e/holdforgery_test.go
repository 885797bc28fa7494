//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authnv1 "k8s.io/api/authentication/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/yaml"

	"clusterip-policy/manifests"
	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// TestForgedOwnerCreatesCannotKeepAHoldReleased plays a client that is not
// the apiserver and reaches the webhook port (no client certificates, as
// on a managed control plane): it POSTs forged AdmissionReviews of
// kube-system/kube-dns's create, which does not exist, so that the
// mutating stage deletes the hold on 10.96.0.10, again and again. A watch
// on that IPAddress measures how long the address was free in all. Each
// release frees it for about --hold-grace, until the leader holds it again;
// the release budget (3 at once, then one a minute) bounds the number of
// releases, whatever the number of forged requests.
func TestForgedOwnerCreatesCannotKeepAHoldReleased(t *testing.T) {
	c := own(t, framework.Options{Policy: sharedPolicy, Webhooks: 1, WebhookArgs: []string{"--hold-reservations"}})
	cs := c.Client(0)
	ctx := testContext(t, 3*time.Minute)
	waitHold(t, ctx, cs, "10.96.0.10", 30*time.Second)

	// Every change of the IPAddress 10.96.0.10, as the apiserver saw it.
	type change struct {
		at   time.Time
		held bool
		rv   string
	}
	var mu sync.Mutex
	var changes []change
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	w, err := cs.NetworkingV1().IPAddresses().Watch(wctx, metav1.ListOptions{FieldSelector: "metadata.name=10.96.0.10"})
	if err != nil {
		t.Fatal(err)
	}
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for ev := range w.ResultChan() {
			a, ok := ev.Object.(*networkingv1.IPAddress)
			if !ok {
				continue
			}
			held := ev.Type != watch.Deleted && a.Labels["ipaddress.kubernetes.io/managed-by"] == "clusterip-policy.io"
			mu.Lock()
			changes = append(changes, change{time.Now(), held, a.ResourceVersion})
			mu.Unlock()
		}
	}()

	svc, err := yaml.YAMLToJSON([]byte(kubeDNSWithoutIP))
	if err != nil {
		t.Fatal(err)
	}
	const forged, every = 40, 250 * time.Millisecond
	released0 := metricSum(t, ctx, c, "clusterip_policy_hold_releases_total", `result="released"`)
	start := time.Now()
	allowed, refused := 0, 0
	for i := range forged {
		if forgeCreate(t, ctx, c, fmt.Sprintf("forged-%03d", i), "kube-system", "kube-dns", svc, "") {
			allowed++
		} else {
			refused++
		}
		time.Sleep(every)
	}
	span := time.Since(start)
	// The last release is followed by the leader's hold within a grace
	// and a pass.
	last := waitHold(t, ctx, cs, "10.96.0.10", 5*time.Second)
	// The watch has caught up once it delivered that hold (with no
	// resourceVersion it starts with the object as it was, so even a hold
	// never released shows up).
	fixtures.Eventually(t, "the watch to deliver the hold on 10.96.0.10 as it is now", 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(changes) > 0 && changes[len(changes)-1].rv == last.ResourceVersion
	})
	end := time.Now()
	stopWatch()
	<-watched

	mu.Lock()
	defer mu.Unlock()
	var free time.Duration
	releases := 0
	held, since := true, start
	for _, ch := range changes {
		switch {
		case held && !ch.held:
			releases++
			held, since = false, ch.at
		case !held && ch.held:
			free += ch.at.Sub(since)
			held = true
		}
	}
	if !held {
		free += end.Sub(since)
	}
	served := metricSum(t, ctx, c, "clusterip_policy_hold_releases_total", `result="released"`) - released0
	t.Logf("e2e: holds: %d forged creates of kube-system/kube-dns over %s from a client that is not the apiserver: %d allowed, %d refused with 503; the hold on 10.96.0.10 was deleted %d times (metric: %v) and the address was free %s in all (%.1f%% of the time)",
		forged, span.Round(time.Millisecond), allowed, refused, releases, served, free.Round(time.Millisecond), 100*free.Seconds()/span.Seconds())
	if releases > 3 || served > 3 {
		t.Errorf("the hold was deleted %d times (%v releases counted) for %d forged creates, want at most the budget's 3", releases, served, forged)
	}
	// Each release frees the address for the 1s grace and the leader's
	// next pass (under 2s: TestReservationHolds).
	if limit := 3 * 2 * time.Second; free > limit {
		t.Errorf("10.96.0.10 was free %s in all, want at most %s (three releases, each ended by the leader's hold)", free, limit)
	}
	// A forged create is allowed when it finds no hold (the leader has not
	// held the address again yet: nothing to release) or when it spends
	// the budget; every other one is refused and counted.
	if n := metricSum(t, ctx, c, "clusterip_policy_hold_releases_total", `result="rate-limited"`); n != float64(refused) || refused == 0 || refused+allowed != forged {
		t.Errorf("%d allowed, %d refused, rate-limited counter %v; want every refusal counted, and some", allowed, refused, n)
	}

}

// forgeCreate POSTs a create of Service ns/name (its JSON, svc) straight to
// the first webhook's mutating path, as a client that is not the apiserver
// can: true when it is allowed, false when it is refused with 503 and a
// message containing refusal; any other answer fails the test.
func forgeCreate(t *testing.T, ctx context.Context, c *framework.Cluster, uid, ns, name string, svc []byte, refusal string) bool {
	t.Helper()
	review := &admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:         types.UID(uid),
			Kind:        metav1.GroupVersionKind{Version: "v1", Kind: "Service"},
			Resource:    metav1.GroupVersionResource{Version: "v1", Resource: "services"},
			RequestKind: &metav1.GroupVersionKind{Version: "v1", Kind: "Service"},
			Namespace:   ns, Name: name, Operation: admissionv1.Create,
			UserInfo: authnv1.UserInfo{Username: "forger"},
			Object:   runtime.RawExtension{Raw: svc},
		},
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := c.Webhooks[0].Review(rctx, manifests.MutatePath, review)
	switch {
	case err != nil:
		t.Fatalf("forged review %s: %v", uid, err)
	case resp.Allowed:
		return true
	case resp.Result != nil && resp.Result.Code == http.StatusServiceUnavailable && strings.Contains(resp.Result.Message, refusal):
		return false
	}
	t.Fatalf("forged review %s: %+v", uid, resp.Result)
	return false
}

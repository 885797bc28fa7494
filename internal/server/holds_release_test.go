package server

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	holdctl "clusterip-policy/internal/controllers/holds"
	"clusterip-policy/internal/logging"
	"clusterip-policy/pkg/holds"
)

// ipAddress is an IPAddress at ip naming the Service ns/name, labelled
// managed by managedBy.
func ipAddress(ip, managedBy, ns, name string) *networkingv1.IPAddress {
	return &networkingv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Name: ip, UID: types.UID("uid-" + ip), Labels: map[string]string{holds.ManagedByLabel: managedBy}},
		Spec:       networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{Resource: "services", Namespace: ns, Name: name}},
	}
}

func TestMutatingStageReleasesTheOwnersHoldBeforeAllocation(t *testing.T) {
	ourHold := func() runtime.Object { return ipAddress("10.96.0.10", holds.ManagedBy, "kube-system", "kube-dns") }
	cases := []struct {
		name    string
		review  []byte
		objects []runtime.Object
		failGet bool
		// failOwner fails the GET of the owner Service.
		failOwner   bool
		ownerExists float64 // releases refused as owner-exists
		allowed     bool
		code        int32
		message     string
		remains     bool // 10.96.0.10 still exists afterwards
		calls       int  // API calls made by the release
		released    float64
	}{
		{name: "an owner asking for no IP is patched to its reservation and its hold is deleted",
			review:  loadReview(t, "mutate-001-create-wh-auto.json", named("kube-system", "kube-dns")),
			objects: []runtime.Object{ourHold()}, allowed: true, remains: false, calls: 3, released: 1},
		{name: "an owner asking for its reserved IP gets its hold deleted",
			review:  loadReview(t, "mutate-003-create-wh-static.json", named("kube-system", "kube-dns"), withClusterIP("10.96.0.10")),
			objects: []runtime.Object{ourHold()}, allowed: true, remains: false, calls: 3, released: 1},
		{name: "a dry run releases nothing",
			review:  loadReview(t, "mutate-005-create-wh-dryrun.json", named("kube-system", "kube-dns")),
			objects: []runtime.Object{ourHold()}, allowed: true, remains: true},
		{name: "an IPAddress the apiserver manages is never deleted",
			review:  loadReview(t, "mutate-001-create-wh-auto.json", named("kube-system", "kube-dns")),
			objects: []runtime.Object{ipAddress("10.96.0.10", "ipallocator.k8s.io", "kube-system", "kube-dns")}, allowed: true, remains: true, calls: 1},
		{name: "another Service's create touches no IPAddress",
			review:  loadReview(t, "mutate-003-create-wh-static.json", named("default", "web"), withClusterIP("10.96.0.30")),
			objects: []runtime.Object{ourHold()}, allowed: true, remains: true},
		{name: "a denied request releases nothing",
			review:  loadReview(t, "mutate-003-create-wh-static.json", named("default", "early-bird"), withClusterIP("10.96.0.10")),
			objects: []runtime.Object{ourHold()}, allowed: false, code: http.StatusForbidden, message: "is reserved for Service kube-system/kube-dns", remains: true},
		{name: "no hold to release: the owner is allowed as before",
			review: loadReview(t, "mutate-001-create-wh-auto.json", named("kube-system", "kube-dns")), allowed: true, calls: 1},
		{name: "a release that fails refuses the request with 503, naming the address and the owner",
			review:  loadReview(t, "mutate-001-create-wh-auto.json", named("kube-system", "kube-dns")),
			objects: []runtime.Object{ourHold()}, failGet: true, allowed: false, code: http.StatusServiceUnavailable,
			message: "could not release its hold on 10.96.0.10 for Service kube-system/kube-dns", remains: true, calls: 1},
		{name: "a create of an owner that already exists (a duplicate, or a review no apiserver sent) releases nothing",
			review:  loadReview(t, "mutate-001-create-wh-auto.json", named("kube-system", "kube-dns")),
			objects: []runtime.Object{ourHold(), &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-dns"}}},
			allowed: true, remains: true, calls: 2, ownerExists: 1},
		{name: "an update of an owner that does not exist (a review no apiserver sent) releases nothing",
			review:  bytes.Replace(loadReview(t, "mutate-003-create-wh-static.json", named("kube-system", "kube-dns"), withClusterIP("10.96.0.10")), []byte(`"operation":"CREATE"`), []byte(`"operation":"UPDATE"`), 1),
			objects: []runtime.Object{ourHold()}, allowed: true, remains: true, calls: 2, ownerExists: 1},
		{name: "a check of the owner that fails refuses the request with 503",
			review:  loadReview(t, "mutate-001-create-wh-auto.json", named("kube-system", "kube-dns")),
			objects: []runtime.Object{ourHold()}, failOwner: true, allowed: false, code: http.StatusServiceUnavailable,
			message: "could not release its hold on 10.96.0.10 for Service kube-system/kube-dns before the apiserver allocates it: get Service kube-system/kube-dns: connection refused", remains: true, calls: 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newTestReviewer(t, testPolicy, true)
			client := fake.NewClientset(tc.objects...)
			if tc.failGet {
				client.PrependReactor("get", "ipaddresses", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, errors.New("connection refused")
				})
			}
			if tc.failOwner {
				client.PrependReactor("get", "services", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, errors.New("connection refused")
				})
			}
			hreg := prometheus.NewRegistry()
			hm := holdctl.NewMetrics(hreg)
			r.hook = holdctl.NewReleaser(client, logging.New(&strings.Builder{}), hm, time.Now)
			resp := post(t, mutatingHandler{r.reviewer}, tc.review)
			calls := len(client.Actions())
			if resp.Allowed != tc.allowed {
				t.Fatalf("allowed = %v, want %v (%+v)", resp.Allowed, tc.allowed, resp.Result)
			}
			if !tc.allowed && (resp.Result.Code != tc.code || !strings.Contains(resp.Result.Message, tc.message)) {
				t.Errorf("result = %d %q, want %d containing %q", resp.Result.Code, resp.Result.Message, tc.code, tc.message)
			}
			client.ClearActions()
			client.ReactionChain = client.ReactionChain[len(client.ReactionChain)-1:] // drop the failing reactor
			_, err := client.NetworkingV1().IPAddresses().Get(context.Background(), "10.96.0.10", metav1.GetOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
			if remains := err == nil; remains != tc.remains {
				t.Errorf("10.96.0.10 remains = %v, want %v", remains, tc.remains)
			}
			if calls != tc.calls {
				t.Errorf("%d API calls by the release, want %d: %v", calls, tc.calls, client.Actions())
			}
			if got := releases(t, hreg, "released"); got != tc.released {
				t.Errorf("releases{released} = %v, want %v", got, tc.released)
			}
			if got := releases(t, hreg, "owner-exists"); got != tc.ownerExists {
				t.Errorf("releases{owner-exists} = %v, want %v", got, tc.ownerExists)
			}
		})
	}
}

// Forged creates of an absent owner, each followed by the leader's new
// hold: the address is freed for the budget's burst, then refused with 503
// until a release is due again, however many reviews arrive.
func TestRepeatedOwnerCreatesReleaseAHoldOnlyWithinTheBudget(t *testing.T) {
	r := newTestReviewer(t, testPolicy, true)
	client := fake.NewClientset()
	hreg := prometheus.NewRegistry()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r.hook = holdctl.NewReleaser(client, logging.New(&strings.Builder{}), holdctl.NewMetrics(hreg), func() time.Time { return now })
	review := loadReview(t, "mutate-001-create-wh-auto.json", named("kube-system", "kube-dns"))
	rehold := func() {
		t.Helper()
		if _, err := client.NetworkingV1().IPAddresses().Create(context.Background(), ipAddress("10.96.0.10", holds.ManagedBy, "kube-system", "kube-dns"), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	freed := 0
	for i := 0; i < 50; i++ {
		rehold() // the leader, a grace after each release
		client.ClearActions()
		resp := post(t, mutatingHandler{r.reviewer}, review)
		switch {
		case resp.Allowed:
			freed++
		case len(client.Actions()) != 1:
			t.Fatalf("review %d, refused, made %d API calls, want 1 (the GET of the hold): %v", i+1, len(client.Actions()), client.Actions())
		case resp.Result.Code != http.StatusServiceUnavailable || !strings.Contains(resp.Result.Message, "clusterip-policy holds 10.96.0.10 for Service kube-system/kube-dns and released it 3 times recently without that Service appearing; it releases it again in "+(holdctl.ReleaseRefill-time.Duration(i)*100*time.Millisecond+time.Second-1).Truncate(time.Second).String()+": retry then"),
			!strings.Contains(resp.Result.Message, "Who can release a hold"):
			t.Fatalf("review %d: %d %q", i+1, resp.Result.Code, resp.Result.Message)
		}
		now = now.Add(100 * time.Millisecond)
	}
	if freed != holdctl.ReleaseBurst {
		t.Fatalf("50 creates within 5s freed the hold %d times, want %d", freed, holdctl.ReleaseBurst)
	}
	if got := releases(t, hreg, "rate-limited"); got != 50-holdctl.ReleaseBurst {
		t.Errorf("releases{rate-limited} = %v, want %d", got, 50-holdctl.ReleaseBurst)
	}
	now = now.Add(holdctl.ReleaseRefill)
	rehold()
	if resp := post(t, mutatingHandler{r.reviewer}, review); !resp.Allowed {
		t.Fatalf("a create one refill later: %+v", resp.Result)
	}
	if _, err := client.NetworkingV1().IPAddresses().Get(context.Background(), "10.96.0.10", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the hold was not released one refill later: %v", err)
	}
	// A create that finds no hold of ours spends nothing: an owner whose
	// hold is not there yet is never refused for it.
	for i := 0; i < 10; i++ {
		if resp := post(t, mutatingHandler{r.reviewer}, review); !resp.Allowed {
			t.Fatalf("create %d with no hold: %+v", i+1, resp.Result)
		}
	}
}

// A release that fails turns an allowed, patched answer into a 503: what
// the apiserver sees. The audit line, the decision counters and the
// response's auditAnnotations must say the same 503 denial, not the
// "patched" the decision was before the release was tried.
func TestAFailedReleaseIsRecordedAsTheDenialItIs(t *testing.T) {
	r := newTestReviewer(t, testPolicy, true)
	client := fake.NewClientset(ipAddress("10.96.0.10", holds.ManagedBy, "kube-system", "kube-dns"))
	client.PrependReactor("get", "ipaddresses", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	r.hook = holdctl.NewReleaser(client, logging.New(&strings.Builder{}), holdctl.NewMetrics(prometheus.NewRegistry()), time.Now)
	resp := post(t, mutatingHandler{r.reviewer}, loadReview(t, "mutate-001-create-wh-auto.json", named("kube-system", "kube-dns")))
	const want = "clusterip-policy could not release its hold on 10.96.0.10 for Service kube-system/kube-dns before the apiserver allocates it: get IPAddress 10.96.0.10: connection refused; retry in a few seconds"
	if resp.Allowed || resp.Result.Code != http.StatusServiceUnavailable || resp.Result.Message != want || len(resp.Patch) != 0 {
		t.Fatalf("response: allowed %v, %d %q, patch %s; want a 503 %q without a patch", resp.Allowed, resp.Result.Code, resp.Result.Message, resp.Patch, want)
	}
	if got := resp.AuditAnnotations["decision"]; got != "denied" {
		t.Errorf("auditAnnotations decision = %q, want denied (%v)", got, resp.AuditAnnotations)
	}
	line := auditOf(t, r.auditBuf)
	if line["decision"] != "denied" || line["message"] != want || len(line["patch"].([]any)) != 0 || len(line["mutations"].([]any)) != 0 {
		t.Errorf("audit line: decision %v message %q patch %v mutations %v; want denied, %q, no patch", line["decision"], line["message"], line["patch"], line["mutations"], want)
	}
	if line["policyDigest"] == "" || line["viewGeneration"] != 1.0 {
		t.Errorf("audit line lost what the decision was made against: policyDigest %v viewGeneration %v", line["policyDigest"], line["viewGeneration"])
	}
	if got := testutil.ToFloat64(r.metrics.decisions.WithLabelValues("mutate", "denied", "")); got != 1 {
		t.Errorf(`decisions_total{mutate,denied,""} = %v, want 1`, got)
	}
	if got := testutil.ToFloat64(r.metrics.decisions.WithLabelValues("mutate", "patched", "")); got != 0 {
		t.Errorf(`decisions_total{mutate,patched,""} = %v, want 0: the request was not patched`, got)
	}
}

// releases reads clusterip_policy_hold_releases_total{result} from reg.
func releases(t *testing.T, reg *prometheus.Registry, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "clusterip_policy_hold_releases_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no clusterip_policy_hold_releases_total{result=%q}", result)
	return 0
}

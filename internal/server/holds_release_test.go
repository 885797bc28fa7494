package server

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"clusterip-policy/internal/admission"
	"clusterip-policy/internal/admission/admissiontest"
	holdctl "clusterip-policy/internal/controllers/holds"
	"clusterip-policy/internal/logging"
	"clusterip-policy/internal/names"
	"clusterip-policy/internal/readiness/readinesstest"
	"clusterip-policy/internal/sharedinformers"
	"clusterip-policy/pkg/allocview"
	"clusterip-policy/pkg/allocview/kubesource"
	"clusterip-policy/pkg/holds"
	"clusterip-policy/test/fixtures"
)

// wired is the mutating endpoint as serve wires it, over readinesstest's
// gate, with the holds' release as its hook: the admission path reaches
// the release only through admission.AllocationHook, so their meeting is
// tested here, where both are imported.
type wired struct {
	mutate         http.Handler
	decisionLogBuf *bytes.Buffer
	reg            *prometheus.Registry
	view           *allocview.View
}

// mirror puts the IPAddresses among objects into the view, as the view's
// own watch of every IPAddress would.
func (w wired) mirror(objects ...runtime.Object) {
	w.view.Update(func(tx *allocview.Tx) {
		for _, o := range objects {
			if a, ok := o.(*networkingv1.IPAddress); ok {
				tx.SetAllocation(netip.MustParseAddr(a.Name), kubesource.HolderOf(a))
			}
		}
	})
}

// newReleaser is the holds' release through client, reading the holds
// from the watch every replica keeps, listed before it returns.
func newReleaser(t *testing.T, client *fake.Clientset, hm *holdctl.Metrics, now func() time.Time) (*holdctl.Releaser, *holdctl.Watch) {
	t.Helper()
	f := sharedinformers.New(client, sharedinformers.Configurations{})
	w, err := holdctl.NewWatch(f)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	f.Start(ctx.Done())
	if !w.WaitForSync(ctx) {
		t.Fatal("the watch of the holds did not list them")
	}
	return holdctl.NewReleaser(client, w, logging.New(&strings.Builder{}), hm, now), w
}

// apiCalls are the calls a release made: the watch's lists and watches
// are not the release's.
func apiCalls(client *fake.Clientset) []k8stesting.Action {
	var out []k8stesting.Action
	for _, a := range client.Actions() {
		if a.GetVerb() != "list" && a.GetVerb() != "watch" {
			out = append(out, a)
		}
	}
	return out
}

func newWired(t *testing.T, hook admission.AllocationHook) wired {
	t.Helper()
	return newWiredPolicy(t, hook, readinesstest.Spec)
}

// newWiredPolicy is newWired over the policy pol.
func newWiredPolicy(t *testing.T, hook admission.AllocationHook, pol string) wired {
	t.Helper()
	var buf bytes.Buffer
	log := logging.New(&buf)
	f := readinesstest.New(t, pol, true, log)
	buf.Reset()
	reg := prometheus.NewRegistry()
	eps := admission.Endpoints(admission.Config{Gate: f.Gate, DecisionLog: log.WithName("audit"), Registry: reg, Hook: hook})
	return wired{mutate: eps[names.MutatePath], decisionLogBuf: &buf, reg: reg, view: f.View}
}

func TestMutatingStageReleasesTheOwnersHoldBeforeAllocation(t *testing.T) {
	ourHold := func() runtime.Object {
		return fixtures.IPAddress("10.96.0.10", holds.ManagedBy, "kube-system", "kube-dns")
	}
	kubeDNS := func() runtime.Object {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-dns"}}
	}
	cases := []struct {
		name    string
		review  []byte
		objects []runtime.Object
		// failDelete fails the DELETE of the hold, failOwner the GET of
		// the owner Service.
		failDelete, failOwner bool
		ownerExists           float64 // releases refused as owner-exists
		allowed               bool
		code                  int32
		message               string
		remains               bool // 10.96.0.10 still exists afterwards
		calls                 int  // API calls made by the release
		released              float64
	}{
		{name: "an owner asking for no IP is patched to its reservation and its hold is deleted",
			review:  admissiontest.LoadReview(t, "mutate-001-create-wh-auto.json", admissiontest.Named("kube-system", "kube-dns")),
			objects: []runtime.Object{ourHold()}, allowed: true, remains: false, calls: 2, released: 1},
		{name: "an owner asking for its reserved IP gets its hold deleted",
			review:  admissiontest.LoadReview(t, "mutate-003-create-wh-static.json", admissiontest.Named("kube-system", "kube-dns"), admissiontest.WithClusterIP("10.96.0.10")),
			objects: []runtime.Object{ourHold()}, allowed: true, remains: false, calls: 2, released: 1},
		{name: "a dry run releases nothing",
			review:  admissiontest.LoadReview(t, "mutate-005-create-wh-dryrun.json", admissiontest.Named("kube-system", "kube-dns")),
			objects: []runtime.Object{ourHold()}, allowed: true, remains: true},
		{name: "a forged create of an owner that exists, whose own IPAddress holds its address, costs no API call and is counted owner-exists",
			review:  admissiontest.LoadReview(t, "mutate-001-create-wh-auto.json", admissiontest.Named("kube-system", "kube-dns")),
			objects: []runtime.Object{fixtures.IPAddress("10.96.0.10", "ipallocator.k8s.io", "kube-system", "kube-dns"), kubeDNS()},
			allowed: true, remains: true, ownerExists: 1},
		{name: "another Service's create touches no IPAddress",
			review:  admissiontest.LoadReview(t, "mutate-003-create-wh-static.json", admissiontest.Named("default", "web"), admissiontest.WithClusterIP("10.96.0.30")),
			objects: []runtime.Object{ourHold()}, allowed: true, remains: true},
		{name: "a denied request releases nothing",
			review:  admissiontest.LoadReview(t, "mutate-003-create-wh-static.json", admissiontest.Named("default", "early-bird"), admissiontest.WithClusterIP("10.96.0.10")),
			objects: []runtime.Object{ourHold()}, allowed: false, code: http.StatusForbidden, message: "is reserved for Service kube-system/kube-dns", remains: true},
		{name: "no hold to release: the owner is allowed as before, with no API call",
			review: admissiontest.LoadReview(t, "mutate-001-create-wh-auto.json", admissiontest.Named("kube-system", "kube-dns")), allowed: true},
		{name: "a release that fails refuses the request with 503, naming the address and the owner",
			review:  admissiontest.LoadReview(t, "mutate-001-create-wh-auto.json", admissiontest.Named("kube-system", "kube-dns")),
			objects: []runtime.Object{ourHold()}, failDelete: true, allowed: false, code: http.StatusServiceUnavailable,
			message: "could not release its hold on 10.96.0.10 for Service kube-system/kube-dns before the apiserver allocates it: delete IPAddress 10.96.0.10: connection refused", remains: true, calls: 2},
		{name: "a create of an owner that exists while our hold names it (a duplicate, or a review no apiserver sent) releases nothing",
			review:  admissiontest.LoadReview(t, "mutate-001-create-wh-auto.json", admissiontest.Named("kube-system", "kube-dns")),
			objects: []runtime.Object{ourHold(), kubeDNS()},
			allowed: true, remains: true, calls: 1, ownerExists: 1},
		{name: "an update of an owner that does not exist (a review no apiserver sent) releases nothing",
			review:  bytes.Replace(admissiontest.LoadReview(t, "mutate-003-create-wh-static.json", admissiontest.Named("kube-system", "kube-dns"), admissiontest.WithClusterIP("10.96.0.10")), []byte(`"operation":"CREATE"`), []byte(`"operation":"UPDATE"`), 1),
			objects: []runtime.Object{ourHold()}, allowed: true, remains: true, calls: 1, ownerExists: 1},
		{name: "a check of the owner that fails refuses the request with 503",
			review:  admissiontest.LoadReview(t, "mutate-001-create-wh-auto.json", admissiontest.Named("kube-system", "kube-dns")),
			objects: []runtime.Object{ourHold()}, failOwner: true, allowed: false, code: http.StatusServiceUnavailable,
			message: "could not release its hold on 10.96.0.10 for Service kube-system/kube-dns before the apiserver allocates it: get Service kube-system/kube-dns: connection refused", remains: true, calls: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(tc.objects...)
			hreg := prometheus.NewRegistry()
			rel, _ := newReleaser(t, client, holdctl.NewMetrics(hreg), time.Now)
			if tc.failDelete {
				client.PrependReactor("delete", "ipaddresses", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, errors.New("connection refused")
				})
			}
			if tc.failOwner {
				client.PrependReactor("get", "services", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, errors.New("connection refused")
				})
			}
			r := newWired(t, rel)
			r.mirror(tc.objects...)
			client.ClearActions()
			resp := admissiontest.Post(t, r.mutate, tc.review)
			calls := apiCalls(client)
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
			if len(calls) != tc.calls {
				t.Errorf("%d API calls by the release, want %d: %v", len(calls), tc.calls, calls)
			}
			if got := counter(t, hreg, "clusterip_policy_hold_releases_total", "result", "released"); got != tc.released {
				t.Errorf("releases{released} = %v, want %v", got, tc.released)
			}
			if got := counter(t, hreg, "clusterip_policy_hold_releases_total", "result", "owner-exists"); got != tc.ownerExists {
				t.Errorf("releases{owner-exists} = %v, want %v", got, tc.ownerExists)
			}
		})
	}
}

// Forged creates of an absent owner, each followed by the leader's new
// hold: the address is freed for the budget's burst, then refused with 503
// until a release is due again, however many reviews arrive, and a refused
// review makes no API call.
func TestRepeatedOwnerCreatesReleaseAHoldOnlyWithinTheBudget(t *testing.T) {
	client := fake.NewClientset()
	hreg := prometheus.NewRegistry()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rel, watch := newReleaser(t, client, holdctl.NewMetrics(hreg), func() time.Time { return now })
	r := newWired(t, rel)
	hold := fixtures.IPAddress("10.96.0.10", holds.ManagedBy, "kube-system", "kube-dns")
	r.mirror(hold) // the view lags behind the releases here; only the watch decides
	review := admissiontest.LoadReview(t, "mutate-001-create-wh-auto.json", admissiontest.Named("kube-system", "kube-dns"))
	rehold := func() {
		t.Helper()
		if _, err := client.NetworkingV1().IPAddresses().Create(context.Background(), hold.DeepCopy(), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		fixtures.Eventually(t, "the hold on 10.96.0.10 in the watch of the holds", 30*time.Second, func() bool { _, ok := watch.Get(netip.MustParseAddr("10.96.0.10")); return ok })
	}
	freed := 0
	for i := 0; i < 50; i++ {
		rehold() // the leader, a grace after each release
		client.ClearActions()
		resp := admissiontest.Post(t, r.mutate, review)
		switch {
		case resp.Allowed:
			freed++
			fixtures.Eventually(t, "the hold on 10.96.0.10 gone from the watch of the holds", 30*time.Second, func() bool { _, ok := watch.Get(netip.MustParseAddr("10.96.0.10")); return !ok })
		case len(apiCalls(client)) != 0:
			t.Fatalf("review %d, refused, made %d API calls, want none: %v", i+1, len(apiCalls(client)), apiCalls(client))
		case resp.Result.Code != http.StatusServiceUnavailable || !strings.Contains(resp.Result.Message, "clusterip-policy holds 10.96.0.10 for Service kube-system/kube-dns and released it 3 times recently without that Service appearing; it releases it again in "+(holdctl.ReleaseRefill-time.Duration(i)*100*time.Millisecond+time.Second-1).Truncate(time.Second).String()+": retry then"),
			!strings.Contains(resp.Result.Message, "Who can release a hold"):
			t.Fatalf("review %d: %d %q", i+1, resp.Result.Code, resp.Result.Message)
		}
		now = now.Add(100 * time.Millisecond)
	}
	if freed != holdctl.ReleaseBurst {
		t.Fatalf("50 creates within 5s freed the hold %d times, want %d", freed, holdctl.ReleaseBurst)
	}
	if got := counter(t, hreg, "clusterip_policy_hold_releases_total", "result", "rate-limited"); got != 50-holdctl.ReleaseBurst {
		t.Errorf("releases{rate-limited} = %v, want %d", got, 50-holdctl.ReleaseBurst)
	}
	now = now.Add(holdctl.ReleaseRefill)
	rehold()
	if resp := admissiontest.Post(t, r.mutate, review); !resp.Allowed {
		t.Fatalf("a create one refill later: %+v", resp.Result)
	}
	if _, err := client.NetworkingV1().IPAddresses().Get(context.Background(), "10.96.0.10", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the hold was not released one refill later: %v", err)
	}
	fixtures.Eventually(t, "the hold on 10.96.0.10 gone from the watch of the holds", 30*time.Second, func() bool { _, ok := watch.Get(netip.MustParseAddr("10.96.0.10")); return !ok })
	// A create that finds no hold of ours spends nothing: an owner whose
	// hold is not there yet is never refused for it.
	for i := 0; i < 10; i++ {
		if resp := admissiontest.Post(t, r.mutate, review); !resp.Allowed {
			t.Fatalf("create %d with no hold: %+v", i+1, resp.Result)
		}
	}
}

// A release that fails turns an allowed, patched answer into a 503: what
// the apiserver sees. The audit line, the decision counters and the
// response's auditAnnotations must say the same 503 denial, not the
// "patched" the decision was before the release was tried.
func TestAFailedReleaseIsRecordedAsTheDenialItIs(t *testing.T) {
	hold := fixtures.IPAddress("10.96.0.10", holds.ManagedBy, "kube-system", "kube-dns")
	client := fake.NewClientset(hold)
	rel, _ := newReleaser(t, client, holdctl.NewMetrics(prometheus.NewRegistry()), time.Now)
	client.PrependReactor("delete", "ipaddresses", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	r := newWired(t, rel)
	r.mirror(hold)
	resp := admissiontest.Post(t, r.mutate, admissiontest.LoadReview(t, "mutate-001-create-wh-auto.json", admissiontest.Named("kube-system", "kube-dns")))
	const want = "clusterip-policy could not release its hold on 10.96.0.10 for Service kube-system/kube-dns before the apiserver allocates it: delete IPAddress 10.96.0.10: connection refused; retry in a few seconds"
	if resp.Allowed || resp.Result.Code != http.StatusServiceUnavailable || resp.Result.Message != want || len(resp.Patch) != 0 {
		t.Fatalf("response: allowed %v, %d %q, patch %s; want a 503 %q without a patch", resp.Allowed, resp.Result.Code, resp.Result.Message, resp.Patch, want)
	}
	if got := resp.AuditAnnotations["decision"]; got != "denied" {
		t.Errorf("auditAnnotations decision = %q, want denied (%v)", got, resp.AuditAnnotations)
	}
	line := admissiontest.DecisionLineOf(t, r.decisionLogBuf)
	if line["decision"] != "denied" || line["message"] != want || len(line["patch"].([]any)) != 0 || len(line["mutations"].([]any)) != 0 {
		t.Errorf("audit line: decision %v message %q patch %v mutations %v; want denied, %q, no patch", line["decision"], line["message"], line["patch"], line["mutations"], want)
	}
	if line["policyDigest"] == "" || line["viewGeneration"] == nil {
		t.Errorf("audit line lost what the decision was made against: policyDigest %v viewGeneration %v", line["policyDigest"], line["viewGeneration"])
	}
	if got := counter(t, r.reg, "clusterip_policy_decisions_total", "stage", "mutate", "decision", "denied", "rule", ""); got != 1 {
		t.Errorf(`decisions_total{mutate,denied,""} = %v, want 1`, got)
	}
	if got := counter(t, r.reg, "clusterip_policy_decisions_total", "stage", "mutate", "decision", "patched", "rule", ""); got != 0 {
		t.Errorf(`decisions_total{mutate,patched,""} = %v, want 0: the request was not patched`, got)
	}
}

// counter reads the counter name{labels} (name, value pairs) from reg; 0
// when the series does not exist yet.
func counter(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for i := 0; i < len(labels); i += 2 {
				found := false
				for _, l := range m.GetLabel() {
					found = found || (l.GetName() == labels[i] && l.GetValue() == labels[i+1])
				}
				if !found {
					continue series
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

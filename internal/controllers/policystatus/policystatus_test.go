package policystatus

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"clusterip-policy/internal/policysource"
	"clusterip-policy/pkg/apis/clusterippolicy/v1alpha1"
	"clusterip-policy/pkg/policy"
	"clusterip-policy/test/fixtures"
)

// policyObject is a ClusterIPPolicy named default at generation gen whose
// spec reserves 10.96.0.10 for the given owners (two owners: refused).
func policyObject(gen int64, owners ...string) *unstructured.Unstructured {
	var res []any
	for _, o := range owners {
		res = append(res, map[string]any{"ip": "10.96.0.10", "service": o})
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.Group + "/" + v1alpha1.Version,
		"kind":       v1alpha1.Kind,
		"metadata":   map[string]any{"name": v1alpha1.ObjectName, "uid": "u1", "generation": gen},
		"spec":       map[string]any{"reservations": res},
	}}
	return u
}

// newPolicyClient is a fake apiserver holding obj. The object is created
// through the client: the fake's constructor files it under a resource name
// it guesses from the kind.
func newPolicyClient(t *testing.T, obj *unstructured.Unstructured) *dynamicfake.FakeDynamicClient {
	t.Helper()
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{policysource.GVR: "ClusterIPPolicyList"})
	if _, err := client.Resource(policysource.GVR).Create(context.Background(), obj.DeepCopy(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return client
}

// replica is one webhook replica's policy side: its store, watcher and
// status writer, all on one fake apiserver.
type replica struct {
	crd    *policysource.ObjectSource
	status *Writer
}

func newReplica(t *testing.T, client *dynamicfake.FakeDynamicClient, inForce int64, inForceSpec *unstructured.Unstructured) *replica {
	t.Helper()
	store := policysource.NewStore("test", logr.Discard(), policysource.NewMetrics(prometheus.NewRegistry()))
	st := New(client, Options{}, logr.Discard())
	c := policysource.NewObjectSource(client, store, st, logr.Discard())
	if inForceSpec != nil {
		// The generation this replica loaded before it lost sight of the
		// later ones (a relist past a generation, an older loader).
		c.Observe(inForceSpec)
		if st.inForce != inForce {
			t.Fatalf("replica loaded generation %d, want %d", st.inForce, inForce)
		}
	}
	return &replica{crd: c, status: st}
}

// Two replicas with different generations in force (one loaded generation
// 2, the other stayed at 1) both watch a generation 3 that is refused.
// When each wrote its own view of the status, every write was an update
// event that made the other write its view back, forever (the same two
// replicas on this fake apiserver before the change: 2029 writes in 2s). Now only the leader writes, a bounded number of times,
// and a change of leader costs one more write, not a loop.
func TestPolicyStatusHasOneWriterWhenReplicasDisagree(t *testing.T) {
	refused := policyObject(3, "kube-system/kube-dns", "default/impostor")
	client := newPolicyClient(t, refused)
	var writes atomic.Int64
	client.PrependReactor("update", v1alpha1.Resource, func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "status" {
			writes.Add(1)
		}
		return false, nil, nil
	})

	a := newReplica(t, client, 2, policyObject(2, "kube-system/kube-dns"))
	b := newReplica(t, client, 1, policyObject(1, "kube-system/kube-dns"))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for _, r := range []*replica{a, b} {
		wg.Add(1)
		go func() { defer wg.Done(); _ = r.crd.Run(ctx) }()
	}

	// Both replicas see generation 3 before anyone leads.
	seen := func(r *replica, ok func(*unstructured.Unstructured) bool) func() bool {
		return func() bool {
			r.status.mu.Lock()
			defer r.status.mu.Unlock()
			return r.status.obj != nil && ok(r.status.obj)
		}
	}
	for _, r := range []*replica{a, b} {
		fixtures.Eventually(t, "a replica's watch delivering generation 3", 30*time.Second,
			seen(r, func(u *unstructured.Unstructured) bool { return u.GetGeneration() == 3 }))
	}

	readyMessage := func() string {
		u, err := client.Resource(policysource.GVR).Get(ctx, v1alpha1.ObjectName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			if m, _ := c.(map[string]any); m["type"] == v1alpha1.ConditionReady {
				s, _ := m["message"].(string)
				return s
			}
		}
		return ""
	}
	// lead runs r's status writer as the leader until its view (want in
	// the Ready message) is written, then until a pass kicked after that
	// is done (the loop of old wrote about a thousand times a second), and
	// returns the writes made meanwhile.
	lead := func(r *replica, want ...string) int64 {
		before := writes.Load()
		lctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); r.status.Work()(lctx) }()
		fixtures.Eventually(t, fmt.Sprintf("the leader's view %q in the Ready message", want), 30*time.Second, func() bool {
			msg := readyMessage()
			for _, w := range want {
				if !strings.Contains(msg, w) {
					return false
				}
			}
			return writes.Load() > before
		})
		// The writer has written: any further write is one too many. A
		// pass that starts after this kick reads what was written (a pass
		// running now is not it: the kick brings one more).
		started := r.status.passesStarted.Load()
		r.status.changed()
		fixtures.Eventually(t, "a pass of the leader after its write", 30*time.Second, func() bool {
			return r.status.passesDone.Load() > started
		})
		stop()
		<-done
		return writes.Load() - before
	}

	if n := lead(a, "generation 3 refused", "generation 2 stays in force"); n < 1 || n > 2 {
		t.Errorf("replica A led and wrote the status %d times, want 1 (2 at most, a conflict retried)", n)
	}
	// The leadership moves to B: it writes its own view once and stops.
	if n := lead(b, "generation 1 stays in force"); n < 1 || n > 2 {
		t.Errorf("replica B led and wrote the status %d times, want 1 (2 at most)", n)
	}
	// Nobody leads: nobody writes, however many events arrive. An event
	// both replicas are seen to receive makes the check more than a pause.
	before := writes.Load()
	u, err := client.Resource(policysource.GVR).Get(ctx, v1alpha1.ObjectName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	u.SetAnnotations(map[string]string{"test/touched": "yes"})
	if _, err := client.Resource(policysource.GVR).Update(ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*replica{a, b} {
		fixtures.Eventually(t, "a replica's watch delivering the touched object", 30*time.Second,
			seen(r, func(u *unstructured.Unstructured) bool { return u.GetAnnotations()["test/touched"] == "yes" }))
	}
	if n := writes.Load() - before; n != 0 {
		t.Errorf("%d status writes with no leader, want 0", n)
	}
}

// The status says what an operator asks first: how many existing Services
// break the policy in force (from the periodic audit), and which generation
// the managed matchConditions encode.
func TestPolicyStatusReportsTheAuditAndTheMatchConditions(t *testing.T) {
	obj := policyObject(4, "kube-system/kube-dns")
	client := newPolicyClient(t, obj)
	st := New(client, Options{Audit: true, Conditions: true}, logr.Discard())
	p, err := policy.ParseObjectSpec([]byte(`{"reservations":[{"ip":"10.96.0.10","service":"kube-system/kube-dns"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	st.Observed(obj, nil, 4, p.Digest)

	status := func() v1alpha1.ClusterIPPolicyStatus {
		t.Helper()
		_, _, next := st.desired()
		return next
	}
	cond := func(s v1alpha1.ClusterIPPolicyStatus, typ string) string {
		for _, c := range s.Conditions {
			if c.Type == typ {
				return string(c.Status) + "/" + c.Reason
			}
		}
		return "absent"
	}
	s := status()
	if got := cond(s, v1alpha1.ConditionAudited) + " " + cond(s, v1alpha1.ConditionMatchConditionsInForce); got != "Unknown/AuditPending Unknown/Pending" {
		t.Errorf("before any audit or conditions write: %s", got)
	}

	st.AuditDone(time.Unix(1700000000, 0), p.Digest, policy.AuditReport{Findings: []policy.Finding{
		{Namespace: "a", Name: "web", Rule: policy.RuleStaticIPInDynamicBand},
		{Namespace: "a", Name: "web", Rule: policy.RuleReservedForOther},
		{Namespace: "b", Name: "db", Rule: policy.RuleOutsideServiceCIDRs},
		{Namespace: "kube-system", Name: "kube-dns", Rule: policy.RuleReservationNotHeld},
	}})
	st.ConditionsInForce("sha256:older")
	s = status()
	if s.Audit == nil || s.Audit.ViolatingServices != 2 || s.Audit.PolicyGeneration != 4 || s.Audit.Findings[string(policy.RuleStaticIPInDynamicBand)] != 1 || s.Audit.Findings[string(policy.RuleReservationNotHeld)] != 1 {
		t.Errorf("audit status %+v, want 2 violating Services (a/web twice, b/db; a missing owner is no violation) under generation 4", s.Audit)
	}
	if got := cond(s, v1alpha1.ConditionAudited) + " " + cond(s, v1alpha1.ConditionMatchConditionsInForce); got != "False/ViolationsFound False/Lagging" {
		t.Errorf("after an audit with findings and conditions of another policy: %s", got)
	}
	if s.MatchConditions == nil || s.MatchConditions.Generation != 0 || s.MatchConditions.PolicyDigest != "sha256:older" {
		t.Errorf("matchConditions %+v, want generation 0 (a policy this object never had in force)", s.MatchConditions)
	}

	st.AuditDone(time.Unix(1700000300, 0), p.Digest, policy.AuditReport{})
	st.ConditionsInForce(p.Digest)
	s = status()
	if got := cond(s, v1alpha1.ConditionAudited) + " " + cond(s, v1alpha1.ConditionMatchConditionsInForce); got != "True/NoViolations True/InForce" {
		t.Errorf("after a clean audit and the conditions in force: %s", got)
	}
	if s.MatchConditions == nil || s.MatchConditions.Generation != 4 {
		t.Errorf("matchConditions %+v, want generation 4", s.MatchConditions)
	}

	// Written once, then equal: the update event it causes writes nothing.
	ctx := context.Background()
	if err := st.write(ctx); err != nil {
		t.Fatal(err)
	}
	u, err := client.Resource(policysource.GVR).Get(ctx, v1alpha1.ObjectName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st.Observed(u, nil, 4, p.Digest)
	if obj, old, next := st.desired(); obj == nil || !statusEqual(*old, next) {
		t.Errorf("the status read back differs from the one written:\n%+v\n%+v", *old, next)
	}
}

// Why the leader cannot write the managed matchConditions is named in the
// MatchConditionsInForce condition, as the keeper reports it (its refusal
// text: the apiserver's reason and the fix), and cleared by a write that
// succeeds. internal/controllers/matchconditions tests that text.
func TestARefusedConditionsWriteIsNamedInTheStatus(t *testing.T) {
	p, err := policy.ParseObjectSpec([]byte(`{"reservations":[{"ip":"10.96.0.10","service":"kube-system/kube-dns"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	const reason = `ValidatingWebhookConfiguration.admissionregistration.k8s.io "clusterip-policy" is invalid: ... undeclared reference to 'isIP' ...; the apiserver refused the expressions: a kube-apiserver older than 1.31 has no isIP, ip or cidr for webhook matchConditions`
	st := New(newPolicyClient(t, policyObject(2)), Options{Conditions: true}, logr.Discard())
	st.Observed(policyObject(2), nil, 2, p.Digest)
	st.ConditionsInForce(p.Digest)
	st.ConditionsWriteFailed(reason)
	_, _, next := st.desired()
	c := meta.FindStatusCondition(next.Conditions, v1alpha1.ConditionMatchConditionsInForce)
	if c == nil || c.Status != "False" || c.Reason != "WriteFailed" || !strings.HasSuffix(c.Message, ": "+reason) {
		t.Fatalf("MatchConditionsInForce %+v, want False/WriteFailed ending in the keeper's reason", c)
	}
	st.ConditionsWriteFailed("")
	_, _, next = st.desired()
	if c := meta.FindStatusCondition(next.Conditions, v1alpha1.ConditionMatchConditionsInForce); c == nil || c.Reason != "InForce" {
		t.Fatalf("after a successful write MatchConditionsInForce is %+v, want InForce", c)
	}
}

// The leader's reachability probe is reported as the condition
// WebhookReachable: Unknown/Pending before a probe, then as the arming
// loop reports it, and absent when the probe is off.
func TestTheReachabilityProbeIsReportedInTheStatus(t *testing.T) {
	p, err := policy.ParseObjectSpec([]byte(`{"reservations":[{"ip":"10.96.0.10","service":"kube-system/kube-dns"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	st := New(newPolicyClient(t, policyObject(2)), Options{}, logr.Discard())
	st.Observed(policyObject(2), nil, 2, p.Digest)
	if _, _, next := st.desired(); meta.FindStatusCondition(next.Conditions, v1alpha1.ConditionWebhookReachable) != nil {
		t.Fatal("WebhookReachable is reported with the probe off")
	}
	st.o.Probe = true
	_, _, next := st.desired()
	if c := meta.FindStatusCondition(next.Conditions, v1alpha1.ConditionWebhookReachable); c == nil || c.Status != "Unknown" || c.Reason != "Pending" {
		t.Fatalf("before a probe WebhookReachable is %+v, want Unknown/Pending", c)
	}
	st.WebhookProbed(false, "Unreachable", "the apiserver did not get an answer from the mutating webhook")
	_, _, next = st.desired()
	if c := meta.FindStatusCondition(next.Conditions, v1alpha1.ConditionWebhookReachable); c == nil || c.Status != "False" || c.Reason != "Unreachable" || c.Message != "the apiserver did not get an answer from the mutating webhook" || c.ObservedGeneration != 2 {
		t.Fatalf("WebhookReachable %+v, want False/Unreachable with the loop's message", c)
	}
	st.WebhookProbed(true, "Reachable", "both answered")
	_, _, next = st.desired()
	if c := meta.FindStatusCondition(next.Conditions, v1alpha1.ConditionWebhookReachable); c == nil || c.Status != "True" || c.Reason != "Reachable" {
		t.Fatalf("WebhookReachable %+v, want True/Reachable", c)
	}
}

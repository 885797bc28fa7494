package clusterread

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"clusterip-policy/test/fixtures"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func listOptions(a k8stesting.Action) metav1.ListOptions {
	return a.(k8stesting.ListActionImpl).GetListOptions()
}

// readCluster follows "continue" to the last page, keeps only what the
// audit reads of each Service, and only lists.
func TestReadClusterReadsEveryPageAndOnlyLists(t *testing.T) {
	client := fake.NewClientset(
		fixtures.ServiceCIDR("kubernetes", "10.96.0.0/16"),
		&networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: "10.96.0.10"}, Spec: networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{Resource: "services", Namespace: "kube-system", Name: "kube-dns"}}},
	)
	pages := map[string]*corev1.ServiceList{
		"": {ListMeta: metav1.ListMeta{Continue: "page-2"}, Items: []corev1.Service{{
			ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "one", Annotations: map[string]string{"big": strings.Repeat("x", 4096)}},
			Spec:       corev1.ServiceSpec{ClusterIP: "10.96.0.11", ClusterIPs: []string{"10.96.0.11"}, Selector: map[string]string{"app": "one"}},
		}}},
		"page-2": {Items: []corev1.Service{{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "two"}, Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.12"}}}},
	}
	client.PrependReactor("list", "services", func(a k8stesting.Action) (bool, runtime.Object, error) {
		o := listOptions(a)
		if o.Limit != pageSize {
			t.Errorf("limit %d, want %d", o.Limit, pageSize)
		}
		return true, pages[o.Continue], nil
	})
	services, snap, err := Cluster(context.Background(), client)
	if err != nil {
		t.Fatal(err)
	}
	if len(services) != 2 || services[0].Name != "one" || services[1].Name != "two" || services[1].Spec.ClusterIP != "10.96.0.12" {
		t.Fatalf("services %+v, want one and two", services)
	}
	if services[0].Annotations != nil || services[0].Spec.Selector != nil || services[0].Spec.ClusterIPs[0] != "10.96.0.11" {
		t.Errorf("kept more (or less) than the audit reads: %+v", services[0])
	}
	if h, ok := snap.Holder(netip.MustParseAddr("10.96.0.10")); !ok || !h.IsService("kube-system", "kube-dns") || !snap.TracksAllocations {
		t.Errorf("holder of 10.96.0.10: %v %v, tracks %v", h, ok, snap.TracksAllocations)
	}
	if c := snap.ServiceCIDRs(); len(c) != 1 || c[0].Name != "kubernetes" || !c[0].Active() {
		t.Errorf("ServiceCIDRs %+v", c)
	}
	for _, a := range client.Actions() {
		if a.GetVerb() != "list" {
			t.Errorf("the audit sent a %s of %s; it only lists", a.GetVerb(), a.GetResource().Resource)
		}
	}
}

// A cluster that serves no ServiceCIDRs or IPAddresses (before 1.33) is
// read without them, and the snapshot says allocations are not tracked.
func TestReadClusterWithoutTheNetworkingAPI(t *testing.T) {
	client := fake.NewClientset(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "one"}, Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.11"}})
	for _, r := range []string{"servicecidrs", "ipaddresses"} {
		client.PrependReactor("list", r, func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewNotFound(schema.GroupResource{Group: "networking.k8s.io", Resource: r}, "")
		})
	}
	services, snap, err := Cluster(context.Background(), client)
	if err != nil {
		t.Fatal(err)
	}
	if len(services) != 1 || len(snap.ServiceCIDRs()) != 0 || snap.TracksAllocations {
		t.Fatalf("services %d, cidrs %d, tracks %v; want 1, 0, false", len(services), len(snap.ServiceCIDRs()), snap.TracksAllocations)
	}
}

// An apiserver that keeps answering "continue" is given up after
// maxPages, with an error that says so.
func TestReadClusterGivesUpAListThatNeverEnds(t *testing.T) {
	client := fake.NewClientset()
	calls := 0
	client.PrependReactor("list", "services", func(k8stesting.Action) (bool, runtime.Object, error) {
		calls++
		return true, &corev1.ServiceList{ListMeta: metav1.ListMeta{Continue: "more"}}, nil
	})
	_, _, err := Cluster(context.Background(), client)
	if err == nil || !strings.Contains(err.Error(), "list services: more than 10000 pages of 500") {
		t.Fatalf("err %v, want the page limit", err)
	}
	if calls != maxPages {
		t.Errorf("%d pages requested, want %d", calls, maxPages)
	}
}

// A forbidden list names what the audit needs.
func TestReadClusterForbiddenNamesThePermissionsNeeded(t *testing.T) {
	client := fake.NewClientset()
	client.PrependReactor("list", "ipaddresses", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "networking.k8s.io", Resource: "ipaddresses"}, "", nil)
	})
	_, _, err := Cluster(context.Background(), client)
	if err == nil || !strings.Contains(err.Error(), "list ipaddresses") || !strings.Contains(err.Error(), "the audit needs list on services (all namespaces), servicecidrs and ipaddresses") {
		t.Fatalf("err %v", err)
	}
}

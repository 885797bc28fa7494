package kubesource

import (
	"context"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"clusterip-policy/pkg/allocview"
	"clusterip-policy/test/fixtures"
)

// servesNetworkingV1 makes the fake discovery answer as a 1.37 apiserver does.
func servesNetworkingV1(c *fake.Clientset) {
	c.Resources = []*metav1.APIResourceList{{
		GroupVersion: "networking.k8s.io/v1",
		APIResources: []metav1.APIResource{{Name: "servicecidrs"}, {Name: "ipaddresses"}},
	}}
}

func TestSourceFollowsServiceCIDRsAndIPAddresses(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset(fixtures.ServiceCIDR("kubernetes", "10.96.0.0/16"), fixtures.IPAddress("10.96.0.1", "ipallocator.k8s.io", "default", "kubernetes"))
	servesNetworkingV1(client)
	view := allocview.NewView()
	src := New(client, view, testr.New(t))
	go func() {
		if err := src.Run(ctx); err != nil {
			t.Error(err)
		}
	}()

	fixtures.Eventually(t, "the initial state, synced", 30*time.Second, func() bool {
		s := view.Snapshot()
		h, ok := s.Holder(netip.MustParseAddr("10.96.0.1"))
		return s.Synced && s.TracksAllocations && ok && h.IsService("default", "kubernetes") && len(s.ServiceCIDRs()) == 1
	})
	if !src.HasSynced() {
		t.Fatal("HasSynced false after the synced snapshot")
	}
	gen := view.Snapshot().Generation

	nw := client.NetworkingV1()
	extra, err := nw.ServiceCIDRs().Create(ctx, fixtures.ServiceCIDR("extra", "10.97.0.0/24"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fixtures.Eventually(t, "a ServiceCIDR added", 30*time.Second, func() bool {
		s := view.Snapshot()
		rs := allocview.ActiveServiceCIDRs(s.ServiceCIDRs(), nil)
		return len(rs.Active) == 2
	})

	extra.Status.Conditions = []metav1.Condition{{Type: networkingv1.ServiceCIDRConditionReady, Status: metav1.ConditionFalse, Reason: "Terminating", LastTransitionTime: metav1.Now()}}
	if _, err := nw.ServiceCIDRs().UpdateStatus(ctx, extra, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	fixtures.Eventually(t, "a ServiceCIDR turned not ready", 30*time.Second, func() bool {
		s := view.Snapshot()
		rs := allocview.ActiveServiceCIDRs(s.ServiceCIDRs(), nil)
		return len(rs.Active) == 1 && len(rs.Excluded) == 1 && rs.Excluded[0].Reason == "not Ready"
	})

	if err := nw.ServiceCIDRs().Delete(ctx, "extra", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	fixtures.Eventually(t, "a ServiceCIDR deleted", 30*time.Second, func() bool { s := view.Snapshot(); return len(s.ServiceCIDRs()) == 1 })

	if _, err := nw.IPAddresses().Create(ctx, fixtures.IPAddress("10.96.0.10", "ipallocator.k8s.io", "kube-system", "kube-dns"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := nw.IPAddresses().Create(ctx, fixtures.IPAddress("fd00:10:96::a", "ipallocator.k8s.io", "kube-system", "kube-dns"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fixtures.Eventually(t, "IPAddresses added", 30*time.Second, func() bool {
		s := view.Snapshot()
		h, ok := s.Holder(netip.MustParseAddr("10.96.0.10"))
		_, ok6 := s.Holder(netip.MustParseAddr("fd00:10:96::a"))
		return ok && ok6 && h.IsService("kube-system", "kube-dns") && s.AllocatedCount() == 3
	})

	if err := nw.IPAddresses().Delete(ctx, "10.96.0.10", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	fixtures.Eventually(t, "an IPAddress removed", 30*time.Second, func() bool {
		s := view.Snapshot()
		_, ok := s.Holder(netip.MustParseAddr("10.96.0.10"))
		return !ok && s.AllocatedCount() == 2
	})
	if view.Snapshot().Generation <= gen {
		t.Fatalf("generation did not grow: %d -> %d", gen, view.Snapshot().Generation)
	}
}

func TestToServiceCIDRFollowsTheApiserversReadiness(t *testing.T) {
	now := metav1.Now()
	tests := []struct {
		name   string
		tweak  func(*networkingv1.ServiceCIDR)
		active bool
	}{
		{name: "counts a ServiceCIDR without conditions as active", tweak: func(*networkingv1.ServiceCIDR) {}, active: true},
		{name: "counts Ready=True as active", tweak: func(c *networkingv1.ServiceCIDR) {
			c.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue}}
		}, active: true},
		{name: "counts Ready=False as inactive", tweak: func(c *networkingv1.ServiceCIDR) {
			c.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse}}
		}},
		{name: "counts a ServiceCIDR being deleted as inactive", tweak: func(c *networkingv1.ServiceCIDR) { c.DeletionTimestamp = &now }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fixtures.ServiceCIDR("x", "10.96.0.0/16", "fd00::/108")
			tt.tweak(c)
			got := ToServiceCIDR(c)
			if got.Active() != tt.active || len(got.CIDRs) != 2 {
				t.Fatalf("got %+v, active want %v", got, tt.active)
			}
		})
	}
}

func TestSourceWithoutTheAPIMarksTheViewSyncedWithoutAllocations(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	view := allocview.NewView()
	src := New(fake.NewClientset(), view, testr.New(t))
	go func() { _ = src.Run(ctx) }()
	fixtures.Eventually(t, "synced without allocations", 30*time.Second, func() bool { s := view.Snapshot(); return s.Synced && !s.TracksAllocations })
	if d, which := src.StaleFor(time.Now()); d != 0 || src.Feeds() != nil {
		t.Fatalf("a source that watches nothing reports stale %s (%s) and feeds %v", d, which, src.Feeds())
	}
}

// A large relist's memory is returned to the system once the view holds
// it; watch events and small relists do not pay for a collection.
func TestALargeRelistReturnsItsMemoryOnce(t *testing.T) {
	for _, tt := range []struct {
		name      string
		threshold int
		want      int32
	}{
		{"a relist of 3 with a threshold of 2", 2, 1},
		{"a relist of 3 with a threshold of 4", 4, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			client := fake.NewClientset(fixtures.ServiceCIDR("kubernetes", "10.96.0.0/16"),
				fixtures.IPAddress("10.96.0.1", "ipallocator.k8s.io", "default", "kubernetes"), fixtures.IPAddress("10.96.0.10", "ipallocator.k8s.io", "kube-system", "kube-dns"), fixtures.IPAddress("10.96.0.11", "ipallocator.k8s.io", "a", "b"))
			servesNetworkingV1(client)
			view := allocview.NewView()
			src := New(client, view, testr.New(t))
			var freed atomic.Int32
			src.largeRelist, src.freeMemory = tt.threshold, func() { freed.Add(1) }
			go func() { _ = src.Run(ctx) }()
			fixtures.Eventually(t, "the initial state", 30*time.Second, func() bool { s := view.Snapshot(); return s.Synced && s.AllocatedCount() == 3 })
			if _, err := client.NetworkingV1().IPAddresses().Create(ctx, fixtures.IPAddress("10.96.0.12", "ipallocator.k8s.io", "c", "d"), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			fixtures.Eventually(t, "a watched IPAddress", 30*time.Second, func() bool { s := view.Snapshot(); return s.AllocatedCount() == 4 })
			if got := freed.Load(); got != tt.want {
				t.Fatalf("memory returned %d times, want %d", got, tt.want)
			}
		})
	}
}

// A hold (our managed-by label) is still its Service's to the decisions;
// only the capacity counts tell it apart.
func TestHolderOfMarksOurHolds(t *testing.T) {
	hold := fixtures.IPAddress("10.96.0.10", "ipallocator.k8s.io", "kube-system", "kube-dns")
	hold.Labels = map[string]string{"ipaddress.kubernetes.io/managed-by": allocview.HoldManager}
	apiservers := fixtures.IPAddress("10.96.0.11", "ipallocator.k8s.io", "kube-system", "kube-dns")
	apiservers.Labels = map[string]string{"ipaddress.kubernetes.io/managed-by": "ipallocator.k8s.io"}
	for _, c := range []struct {
		a    *networkingv1.IPAddress
		ours bool
	}{{hold, true}, {apiservers, false}, {fixtures.IPAddress("10.96.0.12", "ipallocator.k8s.io", "kube-system", "kube-dns"), false}} {
		h := HolderOf(c.a)
		if h.Ours != c.ours || !h.IsService("kube-system", "kube-dns") {
			t.Errorf("HolderOf(%s labelled %v) = %+v, want Ours %v and the Service kube-system/kube-dns", c.a.Name, c.a.Labels, h, c.ours)
		}
	}
}

// Package clusterread lists what an audit reads of a cluster, page by page:
// the Services (only the fields the audit reads), and the ServiceCIDRs and
// IPAddresses as a snapshot built the way kubesource builds the webhook's
// view. The audit command and the leader's periodic audit both read the
// cluster through it.
package clusterread

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"clusterip-policy/pkg/allocview"
	"clusterip-policy/pkg/allocview/kubesource"
	"clusterip-policy/pkg/policy"
)

// pageSize and maxPages bound each list, as kubesource's do: a page of 500
// objects, and at most 5 million objects of a kind.
const (
	pageSize = 500
	maxPages = 10000
)

// Cluster lists the Services, ServiceCIDRs and IPAddresses, page by
// page, and returns the Services (only the fields the audit reads) and a
// snapshot built the way kubesource builds the webhook's view. A cluster
// that does not serve ServiceCIDRs or IPAddresses gives a snapshot without
// them, as kubesource's fallback does.
func Cluster(ctx context.Context, client kubernetes.Interface) ([]*corev1.Service, *allocview.Snapshot, error) {
	services, err := Services(ctx, client)
	if err != nil {
		return nil, nil, err
	}
	snap, err := Allocations(ctx, client)
	if err != nil {
		return nil, nil, err
	}
	return services, snap, nil
}

// Allocations lists the ServiceCIDRs and IPAddresses, page by page, into a
// snapshot built the way kubesource builds the webhook's view (`bands`
// reads only these). A cluster that does not serve them gives a snapshot
// without them (TracksAllocations false without IPAddresses), as
// kubesource's fallback does.
func Allocations(ctx context.Context, client kubernetes.Interface) (*allocview.Snapshot, error) {
	var cidrs []allocview.ServiceCIDR
	cidrErr := Pages(ctx, "servicecidrs", func(ctx context.Context, opts metav1.ListOptions) (metav1.ListMeta, error) {
		l, err := client.NetworkingV1().ServiceCIDRs().List(ctx, opts)
		if err != nil {
			return metav1.ListMeta{}, err
		}
		for i := range l.Items {
			cidrs = append(cidrs, kubesource.ToServiceCIDR(&l.Items[i]))
		}
		return l.ListMeta, nil
	})
	allocs := map[netip.Addr]allocview.Holder{}
	ipErr := Pages(ctx, "ipaddresses", func(ctx context.Context, opts metav1.ListOptions) (metav1.ListMeta, error) {
		l, err := client.NetworkingV1().IPAddresses().List(ctx, opts)
		if err != nil {
			return metav1.ListMeta{}, err
		}
		for i := range l.Items {
			if ip, err := netip.ParseAddr(l.Items[i].Name); err == nil {
				allocs[ip] = kubesource.HolderOf(&l.Items[i])
			}
		}
		return l.ListMeta, nil
	})
	for _, err := range []error{cidrErr, ipErr} {
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, err
		}
	}
	tracks := ipErr == nil
	return allocview.NewView().Update(func(tx *allocview.Tx) {
		tx.ReplaceServiceCIDRs(cidrs)
		tx.ReplaceAllocations(allocs)
		tx.MarkSynced(tracks)
	}), nil
}

// Services lists the Services of all namespaces page by page, keeping
// only the fields the audit reads; the server's periodic audit reads them
// the same way.
func Services(ctx context.Context, client kubernetes.Interface) ([]*corev1.Service, error) {
	var services []*corev1.Service
	err := Pages(ctx, "services", func(ctx context.Context, opts metav1.ListOptions) (metav1.ListMeta, error) {
		l, err := client.CoreV1().Services("").List(ctx, opts)
		if err != nil {
			return metav1.ListMeta{}, err
		}
		for i := range l.Items {
			services = append(services, AuditedFields(&l.Items[i]))
		}
		return l.ListMeta, nil
	})
	return services, err
}

// NamespaceLabels lists the namespaces page by page and returns their
// labels, for the namespaceSelector of the policy's reserved ranges.
func NamespaceLabels(ctx context.Context, client kubernetes.Interface) (map[string]map[string]string, error) {
	out := map[string]map[string]string{}
	err := Pages(ctx, "namespaces", func(ctx context.Context, opts metav1.ListOptions) (metav1.ListMeta, error) {
		l, err := client.CoreV1().Namespaces().List(ctx, opts)
		if err != nil {
			return metav1.ListMeta{}, err
		}
		for i := range l.Items {
			out[l.Items[i].Name] = l.Items[i].Labels
		}
		return l.ListMeta, nil
	})
	return out, err
}

// AuditedFields keeps what the audit reads of a Service, so that a cluster
// of many Services is not held in memory whole.
func AuditedFields(s *corev1.Service) *corev1.Service {
	return &corev1.Service{
		// UID: the periodic audit's Events name the Service by it, as
		// `kubectl describe service` finds them. Labels: a reserved
		// range's serviceSelector reads them.
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name, UID: s.UID, Labels: s.Labels},
		Spec: corev1.ServiceSpec{Type: s.Spec.Type, ClusterIP: s.Spec.ClusterIP, ClusterIPs: s.Spec.ClusterIPs,
			IPFamilies: s.Spec.IPFamilies, IPFamilyPolicy: s.Spec.IPFamilyPolicy},
	}
}

// Pages calls list for each page until the list is complete, at most
// maxPages times; an error names the resource and what to check.
func Pages(ctx context.Context, resource string, list func(context.Context, metav1.ListOptions) (metav1.ListMeta, error)) error {
	opts := metav1.ListOptions{Limit: pageSize}
	for range maxPages {
		meta, err := list(ctx, opts)
		switch {
		case apierrors.IsForbidden(err):
			return fmt.Errorf("list %s: %w; the audit needs list on services (all namespaces), servicecidrs and ipaddresses (networking.k8s.io)", resource, err)
		case err != nil:
			return fmt.Errorf("list %s: %w; check that the kubeconfig's cluster is reachable", resource, err)
		case meta.Continue == "":
			return nil
		}
		opts.Continue = meta.Continue
	}
	return fmt.Errorf("list %s: more than %d pages of %d; the apiserver kept answering \"continue\"", resource, maxPages, pageSize)
}

// PolicyObjectPath is where the apiserver serves the ClusterIPPolicy the
// webhook enforces (--policy-source=crd).
const PolicyObjectPath = "/apis/" + policy.ObjectGroup + "/" + policy.ObjectVersion + "/" + policy.ObjectResource + "/" + policy.ObjectName

// Policy reads the cluster's ClusterIPPolicy and loads its spec as the
// webhook does. found is false when the cluster has none (the object or
// its CRD absent): the caller then decides what to judge against. A spec
// the loader refuses is an error naming the object and the entry.
func Policy(ctx context.Context, client kubernetes.Interface) (p *policy.Policy, generation int64, found bool, err error) {
	raw, err := client.Discovery().RESTClient().Get().AbsPath(PolicyObjectPath).DoRaw(ctx)
	if apierrors.IsNotFound(err) {
		return nil, 0, false, nil
	}
	if err != nil {
		return nil, 0, false, fmt.Errorf("get ClusterIPPolicy %s: %w", policy.ObjectName, err)
	}
	var obj struct {
		Metadata struct {
			Generation int64 `json:"generation"`
		} `json:"metadata"`
		Spec json.RawMessage `json:"spec"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, 0, true, fmt.Errorf("ClusterIPPolicy %s: %w", policy.ObjectName, err)
	}
	p, err = policy.ParseObjectSpec(obj.Spec)
	if err != nil {
		return nil, obj.Metadata.Generation, true, fmt.Errorf("ClusterIPPolicy %s (generation %d): %w", policy.ObjectName, obj.Metadata.Generation, err)
	}
	return p, obj.Metadata.Generation, true, nil
}

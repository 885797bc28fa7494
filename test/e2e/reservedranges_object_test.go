//go:build e2e

package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"clusterip-policy/test/e2e/framework"
	"clusterip-policy/test/fixtures"
)

// rangesObject is a ClusterIPPolicy with the given reservedRanges lines.
func rangesObject(ranges string) string {
	return `apiVersion: clusterip-policy.io/v1alpha1
kind: ClusterIPPolicy
metadata:
  name: default
spec:
  allowedCIDRs: [10.96.0.0/12]
  reservedRanges:
` + ranges
}

// spec.reservedRanges on the real apiserver: the CRD's schema refuses the
// shapes it can express, validate-clusterippolicies refuses what the loader
// and the cluster's ranges decide (an overlap, a range outside every
// active range), and the object in force decides Service creates.
func TestReservedRangesInThePolicyObject(t *testing.T) {
	c := own(t, framework.Options{Webhooks: 0, WebhookArgs: []string{"--policy-source=crd"}})
	cs := c.Client(0)
	ctx := testContext(t, 3*time.Minute)
	kubectl := func(stdin string, args ...string) (string, error) {
		out, errOut, err := c.Kubectl(ctx, stdin, args...)
		return out + errOut, err
	}
	if out, err := kubectl("", "apply", "-f", filepath.Join(c.Root, "manifests", "base", "crd.yaml")); err != nil {
		t.Fatalf("apply the CRD: %v\n%s", err, out)
	}
	if out, err := kubectl("", "wait", "--for=condition=Established", "crd/clusterippolicies.clusterip-policy.io", "--timeout=30s"); err != nil {
		t.Fatalf("the CRD is not established: %v\n%s", err, out)
	}
	t.Run("the schema refuses a range's shape", func(t *testing.T) {
		for name, tc := range map[string]struct{ ranges, want string }{
			"cidr and first/last": {"  - {cidr: 10.96.0.64/27, first: 10.96.0.64, last: 10.96.0.70, namespaces: [a]}\n", "give the range as cidr, or as first and last, not both"},
			"first without last":  {"  - {first: 10.96.0.64, namespaces: [a]}\n", "a range given by addresses needs both first and last"},
			"nobody may use it":   {"  - {cidr: 10.96.0.64/27}\n", "name the namespaces that may use the range"},
			"not a CIDR":          {"  - {cidr: 10.96.0.64/33, namespaces: [a]}\n", "is not a CIDR such as 10.96.0.0/16"},
		} {
			out, err := kubectl(rangesObject(tc.ranges), "apply", "-f", "-")
			if err == nil || !strings.Contains(out, tc.want) {
				t.Errorf("%s: kubectl apply: %v\n%s\nwant a refusal containing %q", name, err, out, tc.want)
			}
		}
	})
	good := rangesObject("  - {cidr: 10.96.0.64/27, namespaces: [rro-dns], note: cluster DNS}\n")
	if out, err := kubectl(good, "apply", "-f", "-"); err != nil {
		t.Fatalf("apply the policy: %v\n%s", err, out)
	}
	if err := c.StartWebhooks(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.RegisterWebhooks(ctx); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"rro-dns", "rro-web"} {
		if err := framework.EnsureNamespace(ctx, cs, ns); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { deleteServices(t, cs, ns) })
	}
	t.Run("the object in force decides creates", func(t *testing.T) {
		eventuallyDenied(t, mutating, func() error {
			_, err := create(ctx, cs, fixtures.Service("rro-web", "squatter", fixtures.WithClusterIP("10.96.0.65")))
			return err
		}, "is in reserved range 10.96.0.64/27 (cluster DNS), which only namespace rro-dns may use")
		mustCreate(t, ctx, cs, fixtures.Service("rro-dns", "coredns", fixtures.WithClusterIP("10.96.0.65")))
	})
	t.Run("validate-clusterippolicies refuses an overlap and a range outside the cluster's ranges", func(t *testing.T) {
		for name, tc := range map[string]struct {
			ranges string
			want   []string
		}{
			"an overlap": {"  - {cidr: 10.96.0.64/27, namespaces: [rro-dns]}\n  - {first: 10.96.0.90, last: 10.96.0.99, namespaces: [rro-web]}\n",
				[]string{"spec.reservedRanges[1]: 10.96.0.90-10.96.0.99 overlaps spec.reservedRanges[0] 10.96.0.64/27", "shrink or merge them"}},
			"outside the active ranges": {"  - {cidr: 10.97.0.0/24, namespaces: [rro-web]}\n",
				[]string{"spec.reservedRanges[0]: 10.97.0.0/24 is not wholly inside one active Service range", "choose a range inside one of them"}},
			"too many addresses": {"  - {cidr: 10.96.16.0/20, namespaces: [rro-web]}\n  - {cidr: 10.96.0.64/27, namespaces: [rro-dns]}\n",
				[]string{"brings reservedRanges to more than 4096 addresses in all", "make the ranges smaller"}},
		} {
			var out string
			var err error
			for range 50 { // the validating webhook may be a moment from its first answer
				if out, err = kubectl(rangesObject(tc.ranges), "apply", "-f", "-"); err != nil && strings.Contains(out, policyObjectWebhook) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err == nil || !strings.Contains(out, policyObjectWebhook) || !containsAll(out, tc.want) {
				t.Errorf("%s: kubectl apply: %v\n%s\nwant %s's refusal containing %q", name, err, out, policyObjectWebhook, tc.want)
			}
		}
	})
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

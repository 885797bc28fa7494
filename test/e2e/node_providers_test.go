//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"clusterip-policy/test/fixtures"
)

// The node's apiserver admits pods of system-cluster-critical only beside a
// ResourceQuota scoped to that class (framework.ProviderAdmissionConfiguration,
// as GKE configures it), and the release namespaces enforce Pod Security as
// the README labels them: what a managed provider's cluster does to the
// chart's pods and hook Jobs.

// restrictedNamespace creates the release namespace labelled as the README
// labels it (`kubectl label namespace clusterip-policy
// pod-security.kubernetes.io/enforce=restricted`), before helm install
// (whose --create-namespace then finds it): the chart's pods and hook Jobs
// must start there. An error, not t.Fatal: TestNodeLifecycle calls it from
// a step its subtests run.
func (n *realNode) restrictedNamespace(ctx context.Context, ns string) error {
	labels := map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}
	_, err := n.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		var got *corev1.Namespace
		if got, err = n.cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err == nil && got.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
			err = fmt.Errorf("namespace %s exists with labels %v, want pod-security.kubernetes.io/enforce=restricted (left by an earlier test?)", ns, got.Labels)
		}
	}
	return err
}

// checkCriticalPodsQuota: the pods run with the chart's default priority
// class, and the chart's ResourceQuota counts them (its status, which the
// controller-manager writes, names as many pods used as want): the quota
// is what admitted them.
func (n *realNode) checkCriticalPodsQuota(t *testing.T, ctx context.Context, ns string, want int64) {
	t.Helper()
	pods, err := n.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=clusterip-policy-webhook"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Spec.PriorityClassName != "system-cluster-critical" {
			t.Errorf("pod %s has priorityClassName %q, want the chart's default system-cluster-critical", p.Name, p.Spec.PriorityClassName)
		}
	}
	fixtures.EventuallyNil(t, "the chart's ResourceQuota counting the webhook pods", time.Minute, func() error {
		q, err := n.cs.CoreV1().ResourceQuotas(ns).Get(ctx, "clusterip-policy-critical-pods", metav1.GetOptions{})
		if err != nil {
			return err
		}
		used, hard := q.Status.Used[corev1.ResourcePods], q.Status.Hard[corev1.ResourcePods]
		if used.Value() != want {
			return fmt.Errorf("ResourceQuota clusterip-policy-critical-pods: used %s of %s pods, want %d", used.String(), hard.String(), want)
		}
		t.Logf("e2e: node: the chart's ResourceQuota admits the webhook's system-cluster-critical pods: %s of %s used", used.String(), hard.String())
		return nil
	})
}

package framework

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ApplyRBAC creates the webhook's roles and bindings from manifests/base.
func (c *Cluster) ApplyRBAC(ctx context.Context) error {
	r, err := LoadRBAC(c.Root)
	if err != nil {
		return err
	}
	c.RBAC = r
	cs := c.Client(0)
	ns := map[string]bool{}
	for _, o := range r.Roles {
		ns[o.Namespace] = true
	}
	for _, o := range r.RoleBindings {
		ns[o.Namespace] = true
	}
	for n := range ns {
		if err := EnsureNamespace(ctx, cs, n); err != nil {
			return err
		}
	}
	for _, o := range r.ClusterRoles {
		if _, err := cs.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create ClusterRole %s: %w", o.Name, err)
		}
	}
	for _, o := range r.ClusterRoleBindings {
		if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create ClusterRoleBinding %s: %w", o.Name, err)
		}
	}
	for _, o := range r.Roles {
		if _, err := cs.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create Role %s/%s: %w", o.Namespace, o.Name, err)
		}
	}
	for _, o := range r.RoleBindings {
		if _, err := cs.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create RoleBinding %s/%s: %w", o.Namespace, o.Name, err)
		}
	}
	for _, o := range r.AdmissionPolicies {
		if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, o, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create ValidatingAdmissionPolicy %s: %w", o.Name, err)
		}
	}
	for _, o := range r.AdmissionBindings {
		if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, o, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create ValidatingAdmissionPolicyBinding %s: %w", o.Name, err)
		}
	}
	c.Logf("e2e: webhook runs as %s with the RBAC of %s", r.UserName(), r.Source)
	return nil
}

// EnsureNamespace creates namespace name unless it exists.
func EnsureNamespace(ctx context.Context, cs kubernetes.Interface, name string) error {
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return nil
}

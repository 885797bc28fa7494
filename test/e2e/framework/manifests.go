package framework

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"clusterip-policy/internal/names"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"clusterip-policy/manifests"
)

// WebhookConfigurationsFile is where the deployment manifests define the two
// webhook configurations. The harness registers exactly those, changing only
// each webhook's clientConfig.
const WebhookConfigurationsFile = "manifests/base/webhook-configurations.yaml"

// Webhook names and paths, as manifests/base and the webhook binary name them.
const (
	MutatingWebhookName   = names.MutatingServiceWebhook
	ValidatingWebhookName = names.ValidatingServiceWebhook
	MutatePath            = manifests.MutatePath
	ValidatePath          = manifests.ValidatePath
)

// WebhookConfigurations are the Mutating- and ValidatingWebhookConfiguration
// of the project.
type WebhookConfigurations struct {
	Source     string // the file they came from
	Mutating   *admissionv1.MutatingWebhookConfiguration
	Validating *admissionv1.ValidatingWebhookConfiguration
}

// LoadWebhookConfigurations reads WebhookConfigurationsFile under root. A
// missing file is an error: the suite must test the shipped definitions,
// never a copy of them.
func LoadWebhookConfigurations(root string) (*WebhookConfigurations, error) {
	path := filepath.Join(root, WebhookConfigurationsFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	wc := &WebhookConfigurations{Source: WebhookConfigurationsFile}
	docs, err := manifests.SplitYAML(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, doc := range docs {
		switch kindOf(doc) {
		case "MutatingWebhookConfiguration":
			wc.Mutating = &admissionv1.MutatingWebhookConfiguration{}
			if err := yaml.UnmarshalStrict(doc, wc.Mutating); err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
		case "ValidatingWebhookConfiguration":
			wc.Validating = &admissionv1.ValidatingWebhookConfiguration{}
			if err := yaml.UnmarshalStrict(doc, wc.Validating); err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
		}
	}
	if wc.Mutating == nil || wc.Validating == nil {
		return nil, fmt.Errorf("%s must define a MutatingWebhookConfiguration and a ValidatingWebhookConfiguration", path)
	}
	return wc, nil
}

// PointAt sets every webhook's clientConfig to https://addr plus the path the
// manifest gives (its service.path), trusting caPEM. Nothing else changes.
func (wc *WebhookConfigurations) PointAt(addr string, caPEM []byte) {
	for i := range wc.Mutating.Webhooks {
		wc.Mutating.Webhooks[i].ClientConfig = clientConfig(wc.Mutating.Webhooks[i].ClientConfig, MutatePath, addr, caPEM)
	}
	for i := range wc.Validating.Webhooks {
		wc.Validating.Webhooks[i].ClientConfig = clientConfig(wc.Validating.Webhooks[i].ClientConfig, ValidatePath, addr, caPEM)
	}
}

// Arm sets failurePolicy Fail on the two Service webhooks, as the
// webhook's leader does with --arm-failure-policy once its probe proved
// the apiserver reaches a ready replica: the manifests register them not
// armed (Ignore). Tests that do not run the leader's arming get the
// fail-closed configuration the product runs with.
func (wc *WebhookConfigurations) Arm() {
	fail := admissionv1.Fail
	for i := range wc.Mutating.Webhooks {
		if wc.Mutating.Webhooks[i].Name == MutatingWebhookName {
			wc.Mutating.Webhooks[i].FailurePolicy = &fail
		}
	}
	for i := range wc.Validating.Webhooks {
		if wc.Validating.Webhooks[i].Name == ValidatingWebhookName {
			wc.Validating.Webhooks[i].FailurePolicy = &fail
		}
	}
}

func clientConfig(old admissionv1.WebhookClientConfig, defaultPath, addr string, caPEM []byte) admissionv1.WebhookClientConfig {
	path := defaultPath
	if old.Service != nil && old.Service.Path != nil {
		path = *old.Service.Path
	}
	url := "https://" + addr + path
	return admissionv1.WebhookClientConfig{URL: &url, CABundle: caPEM}
}

// RBAC is what the manifests grant the webhook's service account, cluster
// wide and in namespaces.
type RBAC struct {
	Source              string
	ServiceAccount      rbacv1.Subject // Kind ServiceAccount
	ClusterRoles        []*rbacv1.ClusterRole
	ClusterRoleBindings []*rbacv1.ClusterRoleBinding
	Roles               []*rbacv1.Role
	RoleBindings        []*rbacv1.RoleBinding
	// AdmissionPolicies and AdmissionBindings bound what a role cannot
	// (the probe's create right to dry runs).
	AdmissionPolicies []*admissionv1.ValidatingAdmissionPolicy
	AdmissionBindings []*admissionv1.ValidatingAdmissionPolicyBinding
}

// UserName is the name the apiserver gives the service account.
func (r *RBAC) UserName() string {
	return "system:serviceaccount:" + r.ServiceAccount.Namespace + ":" + r.ServiceAccount.Name
}

// Groups are the groups of the service account.
func (r *RBAC) Groups() []string {
	return []string{"system:serviceaccounts", "system:serviceaccounts:" + r.ServiceAccount.Namespace}
}

// LoadRBAC collects the roles and bindings of manifests/base (every YAML
// file but kustomization.yaml). The harness creates them and runs the
// webhook as that service account (with a client certificate), so the tests
// prove the shipped permissions suffice. Without them it fails: the suite
// tests the shipped RBAC, never a copy of it.
func LoadRBAC(root string) (*RBAC, error) {
	dir := filepath.Join(root, "manifests", "base")
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	sort.Strings(files)
	r := &RBAC{Source: "manifests/base"}
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		docs, err := manifests.SplitYAML(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		for _, doc := range docs {
			var err error
			switch kindOf(doc) {
			case "ClusterRole":
				o := &rbacv1.ClusterRole{}
				err = yaml.Unmarshal(doc, o)
				r.ClusterRoles = append(r.ClusterRoles, o)
			case "ClusterRoleBinding":
				o := &rbacv1.ClusterRoleBinding{}
				err = yaml.Unmarshal(doc, o)
				r.ClusterRoleBindings = append(r.ClusterRoleBindings, o)
			case "Role":
				o := &rbacv1.Role{}
				err = yaml.Unmarshal(doc, o)
				r.Roles = append(r.Roles, o)
			case "RoleBinding":
				o := &rbacv1.RoleBinding{}
				err = yaml.Unmarshal(doc, o)
				r.RoleBindings = append(r.RoleBindings, o)
			case "ValidatingAdmissionPolicy":
				o := &admissionv1.ValidatingAdmissionPolicy{}
				err = yaml.Unmarshal(doc, o)
				r.AdmissionPolicies = append(r.AdmissionPolicies, o)
			case "ValidatingAdmissionPolicyBinding":
				o := &admissionv1.ValidatingAdmissionPolicyBinding{}
				err = yaml.Unmarshal(doc, o)
				r.AdmissionBindings = append(r.AdmissionBindings, o)
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
		}
	}
	for _, b := range r.ClusterRoleBindings {
		for _, s := range b.Subjects {
			if s.Kind == rbacv1.ServiceAccountKind {
				r.ServiceAccount = s
				return r, nil
			}
		}
	}
	return nil, fmt.Errorf("no ClusterRoleBinding in %s binds a ServiceAccount", dir)
}

func kindOf(doc []byte) string {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return ""
	}
	return strings.TrimSpace(tm.Kind)
}

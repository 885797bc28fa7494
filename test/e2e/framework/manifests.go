package framework

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// WebhookConfigurationsFile is where the deployment manifests define the two
// webhook configurations. The harness registers exactly those, changing only
// each webhook's clientConfig.
const WebhookConfigurationsFile = "manifests/base/webhook-configurations.yaml"

// Webhook names and paths of the built-in definitions, used only while the
// manifests do not exist yet.
const (
	MutatingWebhookName   = "mutate-services.clusterip-policy.io"
	ValidatingWebhookName = "validate-services.clusterip-policy.io"
	MutatePath            = "/mutate-v1-service"
	ValidatePath          = "/validate-v1-service"
)

// WebhookConfigurations are the Mutating- and ValidatingWebhookConfiguration
// of the project.
type WebhookConfigurations struct {
	Source     string // the file they came from, or "built-in"
	Mutating   *admissionv1.MutatingWebhookConfiguration
	Validating *admissionv1.ValidatingWebhookConfiguration
}

// LoadWebhookConfigurations reads WebhookConfigurationsFile under root.
// Without that file it returns the built-in equivalent and says so in Source.
func LoadWebhookConfigurations(root string) (*WebhookConfigurations, error) {
	path := filepath.Join(root, WebhookConfigurationsFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return builtinWebhookConfigurations(), nil
	}
	if err != nil {
		return nil, err
	}
	wc := &WebhookConfigurations{Source: WebhookConfigurationsFile}
	docs, err := splitYAML(data)
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

func clientConfig(old admissionv1.WebhookClientConfig, defaultPath, addr string, caPEM []byte) admissionv1.WebhookClientConfig {
	path := defaultPath
	if old.Service != nil && old.Service.Path != nil {
		path = *old.Service.Path
	}
	url := "https://" + addr + path
	return admissionv1.WebhookClientConfig{URL: &url, CABundle: caPEM}
}

func builtinWebhookConfigurations() *WebhookConfigurations {
	fail := admissionv1.Fail
	none := admissionv1.SideEffectClassNone
	equivalent := admissionv1.Equivalent
	never := admissionv1.NeverReinvocationPolicy
	timeout := int32(10)
	rules := []admissionv1.RuleWithOperations{{
		Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
		Rule: admissionv1.Rule{
			APIGroups:   []string{""},
			APIVersions: []string{"v1"},
			Resources:   []string{"services"},
		},
	}}
	meta := metav1.ObjectMeta{Name: "clusterip-policy", Labels: map[string]string{"app.kubernetes.io/name": "clusterip-policy"}}
	return &WebhookConfigurations{
		Source: "built-in (" + WebhookConfigurationsFile + " not found)",
		Mutating: &admissionv1.MutatingWebhookConfiguration{
			TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingWebhookConfiguration"},
			ObjectMeta: meta,
			Webhooks: []admissionv1.MutatingWebhook{{
				Name:                    MutatingWebhookName,
				Rules:                   rules,
				FailurePolicy:           &fail,
				MatchPolicy:             &equivalent,
				SideEffects:             &none,
				TimeoutSeconds:          &timeout,
				AdmissionReviewVersions: []string{"v1"},
				ReinvocationPolicy:      &never,
			}},
		},
		Validating: &admissionv1.ValidatingWebhookConfiguration{
			TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"},
			ObjectMeta: meta,
			Webhooks: []admissionv1.ValidatingWebhook{{
				Name:                    ValidatingWebhookName,
				Rules:                   rules,
				FailurePolicy:           &fail,
				MatchPolicy:             &equivalent,
				SideEffects:             &none,
				TimeoutSeconds:          &timeout,
				AdmissionReviewVersions: []string{"v1"},
			}},
		},
	}
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
// prove the shipped permissions suffice. Without manifests it returns
// read-only access to ServiceCIDRs and IPAddresses for
// clusterip-policy/clusterip-policy-webhook.
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
		docs, err := splitYAML(data)
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
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
		}
	}
	if len(r.ClusterRoleBindings) == 0 {
		return builtinRBAC(), nil
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

func builtinRBAC() *RBAC {
	sa := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: "clusterip-policy", Name: "clusterip-policy-webhook"}
	return &RBAC{
		Source:         "built-in (no ClusterRoleBinding in manifests/base)",
		ServiceAccount: sa,
		ClusterRoles: []*rbacv1.ClusterRole{{
			ObjectMeta: metav1.ObjectMeta{Name: "clusterip-policy-webhook"},
			Rules: []rbacv1.PolicyRule{{
				APIGroups: []string{"networking.k8s.io"},
				Resources: []string{"servicecidrs", "ipaddresses"},
				Verbs:     []string{"get", "list", "watch"},
			}},
		}},
		ClusterRoleBindings: []*rbacv1.ClusterRoleBinding{{
			ObjectMeta: metav1.ObjectMeta{Name: "clusterip-policy-webhook"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "clusterip-policy-webhook"},
			Subjects:   []rbacv1.Subject{sa},
		}},
	}
}

// splitYAML splits a multi-document YAML stream into JSON documents.
func splitYAML(data []byte) ([][]byte, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var docs [][]byte
	for {
		var raw map[string]any
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return docs, nil
			}
			return nil, err
		}
		if len(raw) == 0 {
			continue
		}
		b, err := yaml.Marshal(raw)
		if err != nil {
			return nil, err
		}
		docs = append(docs, b)
	}
}

func kindOf(doc []byte) string {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return ""
	}
	return strings.TrimSpace(tm.Kind)
}

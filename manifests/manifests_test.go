package manifests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	admv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// Names the rest of the project relies on (docs/rules.md, the e2e harness, docs).
const (
	ownNamespace     = "clusterip-policy"
	deploymentName   = "clusterip-policy-webhook"
	policyConfigMap  = "clusterip-policy"
	policyKey        = "policy.yaml"
	tlsSecret        = "clusterip-policy-webhook-tls"
	webhookConfigs   = "webhook-configurations.yaml"
	defaultGraceSecs = 30 // the kubelet's default terminationGracePeriodSeconds
)

// objects is every object of a kustomize directory, decoded strictly into
// the API types, so a misspelt field (timeoutSecond) fails the load.
type objects struct {
	Namespaces          []*corev1.Namespace
	ServiceAccounts     []*corev1.ServiceAccount
	ConfigMaps          []*corev1.ConfigMap
	Services            []*corev1.Service
	Deployments         []*appsv1.Deployment
	PDBs                []*policyv1.PodDisruptionBudget
	ClusterRoles        []*rbacv1.ClusterRole
	ClusterRoleBindings []*rbacv1.ClusterRoleBinding
	Roles               []*rbacv1.Role
	RoleBindings        []*rbacv1.RoleBinding
	Mutating            []*admv1.MutatingWebhookConfiguration
	Validating          []*admv1.ValidatingWebhookConfiguration
	CRDs                []*apiextensionsv1.CustomResourceDefinition
	Policies            []*policyObject               // ClusterIPPolicy (policysource_test.go)
	NetworkPolicies     []*networkingv1.NetworkPolicy // the chart's optional one
	AdmissionPolicies   []*admv1.ValidatingAdmissionPolicy
	AdmissionBindings   []*admv1.ValidatingAdmissionPolicyBinding
	ResourceQuotas      []*corev1.ResourceQuota // the chart's criticalPodsQuota
}

func add[T any](list *[]*T, doc []byte) error {
	v := new(T)
	if err := yaml.UnmarshalStrict(doc, v); err != nil {
		return err
	}
	*list = append(*list, v)
	return nil
}

func (o *objects) decode(doc []byte) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return err
	}
	switch tm.APIVersion + " " + tm.Kind {
	case "v1 Namespace":
		return add(&o.Namespaces, doc)
	case "v1 ServiceAccount":
		return add(&o.ServiceAccounts, doc)
	case "v1 ConfigMap":
		return add(&o.ConfigMaps, doc)
	case "v1 Service":
		return add(&o.Services, doc)
	case "apps/v1 Deployment":
		return add(&o.Deployments, doc)
	case "policy/v1 PodDisruptionBudget":
		return add(&o.PDBs, doc)
	case "rbac.authorization.k8s.io/v1 ClusterRole":
		return add(&o.ClusterRoles, doc)
	case "rbac.authorization.k8s.io/v1 ClusterRoleBinding":
		return add(&o.ClusterRoleBindings, doc)
	case "rbac.authorization.k8s.io/v1 Role":
		return add(&o.Roles, doc)
	case "rbac.authorization.k8s.io/v1 RoleBinding":
		return add(&o.RoleBindings, doc)
	case "admissionregistration.k8s.io/v1 MutatingWebhookConfiguration":
		return add(&o.Mutating, doc)
	case "admissionregistration.k8s.io/v1 ValidatingWebhookConfiguration":
		return add(&o.Validating, doc)
	case "apiextensions.k8s.io/v1 CustomResourceDefinition":
		return add(&o.CRDs, doc)
	case "clusterip-policy.io/v1alpha1 ClusterIPPolicy":
		return add(&o.Policies, doc)
	case "networking.k8s.io/v1 NetworkPolicy":
		return add(&o.NetworkPolicies, doc)
	case "admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy":
		return add(&o.AdmissionPolicies, doc)
	case "admissionregistration.k8s.io/v1 ValidatingAdmissionPolicyBinding":
		return add(&o.AdmissionBindings, doc)
	case "v1 ResourceQuota":
		return add(&o.ResourceQuotas, doc)
	}
	return fmt.Errorf("%s %s: the safety tests do not know this kind; teach manifests_test.go about it", tm.APIVersion, tm.Kind)
}

// kustomization is the part of a kustomization.yaml these tests read.
type kustomization struct {
	Resources          []string    `json:"resources"`
	Components         []string    `json:"components"`
	Patches            []patchRef  `json:"patches"`
	SecretGenerator    []generator `json:"secretGenerator"`
	ConfigMapGenerator []generator `json:"configMapGenerator"`
}

type patchRef struct {
	Path string `json:"path"`
}

type generator struct {
	Name      string   `json:"name"`
	Namespace string   `json:"namespace"`
	Type      string   `json:"type"`
	Files     []string `json:"files"`
	Options   struct {
		DisableNameSuffixHash bool `json:"disableNameSuffixHash"`
	} `json:"options"`
}

func readKustomization(t *testing.T, dir string) kustomization {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := yaml.Unmarshal(data, &k); err != nil {
		t.Fatalf("%s/kustomization.yaml: %v", dir, err)
	}
	return k
}

// loadBase decodes every resource the base kustomization lists. Each call
// reads the files afresh, so a test may change what it gets.
func loadBase(t *testing.T) *objects {
	t.Helper()
	o := &objects{}
	for _, res := range readKustomization(t, "base").Resources {
		data, err := os.ReadFile(filepath.Join("base", res))
		if err != nil {
			t.Fatal(err)
		}
		docs, err := SplitYAML(data)
		if err != nil {
			t.Fatalf("base/%s: %v", res, err)
		}
		for i, doc := range docs {
			if err := o.decode(doc); err != nil {
				t.Fatalf("base/%s, document %d: %v", res, i+1, err)
			}
		}
	}
	return o
}

// --- helpers over the objects ---

// webhook is one webhook of either configuration, for checks that apply to both.
type webhook struct {
	where                   string // "MutatingWebhookConfiguration clusterip-policy, webhook mutate-..."
	name                    string
	mutating                bool
	clientConfig            admv1.WebhookClientConfig
	rules                   []admv1.RuleWithOperations
	failurePolicy           *admv1.FailurePolicyType
	matchPolicy             *admv1.MatchPolicyType
	namespaceSelector       *metav1.LabelSelector
	sideEffects             *admv1.SideEffectClass
	timeoutSeconds          *int32
	admissionReviewVersions []string
	matchConditions         []admv1.MatchCondition
	reinvocationPolicy      *admv1.ReinvocationPolicyType
}

func (o *objects) webhooks() []webhook {
	var out []webhook
	for _, c := range o.Mutating {
		for _, w := range c.Webhooks {
			out = append(out, webhook{
				where: fmt.Sprintf("MutatingWebhookConfiguration %s, webhook %s", c.Name, w.Name), name: w.Name,
				mutating: true, clientConfig: w.ClientConfig, rules: w.Rules, failurePolicy: w.FailurePolicy,
				matchPolicy: w.MatchPolicy, namespaceSelector: w.NamespaceSelector, sideEffects: w.SideEffects,
				timeoutSeconds: w.TimeoutSeconds, admissionReviewVersions: w.AdmissionReviewVersions,
				matchConditions: w.MatchConditions, reinvocationPolicy: w.ReinvocationPolicy,
			})
		}
	}
	for _, c := range o.Validating {
		for _, w := range c.Webhooks {
			out = append(out, webhook{
				where: fmt.Sprintf("ValidatingWebhookConfiguration %s, webhook %s", c.Name, w.Name), name: w.Name,
				clientConfig: w.ClientConfig, rules: w.Rules, failurePolicy: w.FailurePolicy,
				matchPolicy: w.MatchPolicy, namespaceSelector: w.NamespaceSelector, sideEffects: w.SideEffects,
				timeoutSeconds: w.TimeoutSeconds, admissionReviewVersions: w.AdmissionReviewVersions,
				matchConditions: w.MatchConditions,
			})
		}
	}
	return out
}

// container is one container of a pod template, with the pod it runs in.
type container struct {
	where string
	pod   *corev1.PodSpec
	c     *corev1.Container
}

func (o *objects) containers() []container {
	var out []container
	for _, d := range o.Deployments {
		spec := &d.Spec.Template.Spec
		for i := range spec.InitContainers {
			out = append(out, container{fmt.Sprintf("Deployment %s, init container %s", d.Name, spec.InitContainers[i].Name), spec, &spec.InitContainers[i]})
		}
		for i := range spec.Containers {
			out = append(out, container{fmt.Sprintf("Deployment %s, container %s", d.Name, spec.Containers[i].Name), spec, &spec.Containers[i]})
		}
	}
	return out
}

// webhookContainer is the container that serves the webhook.
func (o *objects) webhookContainer() (*appsv1.Deployment, *corev1.Container, error) {
	for _, d := range o.Deployments {
		if d.Name != deploymentName {
			continue
		}
		for i := range d.Spec.Template.Spec.Containers {
			if c := &d.Spec.Template.Spec.Containers[i]; c.Name == "webhook" {
				return d, c, nil
			}
		}
		return nil, nil, fmt.Errorf("Deployment %s has no container named webhook", d.Name)
	}
	return nil, nil, fmt.Errorf("no Deployment %s", deploymentName)
}

// flagValue returns the value of --name in a container's command line.
func flagValue(c *corev1.Container, name string) (string, bool) {
	args := append(slices.Clone(c.Command), c.Args...)
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
		if a == "--"+name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

// containerPort resolves a named or numbered port of c.
func containerPort(c *corev1.Container, p intstr.IntOrString) (int32, bool) {
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

// bindPort is the port of a --*-bind-address value such as ":8081".
func bindPort(addr string) (int32, error) {
	i := strings.LastIndex(addr, ":")
	if i < 0 {
		return 0, fmt.Errorf("%q has no port", addr)
	}
	n, err := strconv.ParseInt(addr[i+1:], 10, 32)
	return int32(n), err
}

func selects(sel *metav1.LabelSelector, set map[string]string) bool {
	if sel == nil {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && !s.Empty() && s.Matches(labels.Set(set))
}

func problemf(format string, args ...any) string { return fmt.Sprintf(format, args...) }

// The base installs onto clusters whose ranges nobody told us: its policy
// states no address (no reservation, no serviceCIDRs, no allowedCIDRs) and
// only warns, so it cannot refuse a Service or raise reservation-not-held
// Events on a cluster that is not 10.96.0.0/12. The policy-file component
// holds the same document, so both policy sources start alike.
func TestTheShippedPolicyStatesNoAddressAndWarns(t *testing.T) {
	o := loadBase(t)
	if len(o.Policies) != 1 {
		t.Fatalf("the base has %d ClusterIPPolicy objects, want 1", len(o.Policies))
	}
	var spec struct {
		ServiceCIDRs []string `json:"serviceCIDRs"`
		AllowedCIDRs []string `json:"allowedCIDRs"`
		Reservations []any    `json:"reservations"`
		Enforcement  struct {
			Default string            `json:"default"`
			Rules   map[string]string `json:"rules"`
		} `json:"enforcement"`
	}
	if err := json.Unmarshal(o.Policies[0].Spec, &spec); err != nil {
		t.Fatal(err)
	}
	if len(spec.ServiceCIDRs)+len(spec.AllowedCIDRs)+len(spec.Reservations) != 0 {
		t.Errorf("the base's policy states addresses (serviceCIDRs %v, allowedCIDRs %v, %d reservations); a user adds them in an overlay", spec.ServiceCIDRs, spec.AllowedCIDRs, len(spec.Reservations))
	}
	if spec.Enforcement.Default != "warn" || len(spec.Enforcement.Rules) != 0 {
		t.Errorf("the base's enforcement is %q (rules %v), want warn for a first install", spec.Enforcement.Default, spec.Enforcement.Rules)
	}
	base, err := os.ReadFile(filepath.Join("base", "clusterippolicy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := string(base[bytes.Index(base, []byte("apiVersion:")):])
	for _, cm := range withComponent(t, policyFileComponent).ConfigMaps {
		if cm.Name == policyConfigMap {
			if got := cm.Data[policyKey]; got != want {
				t.Fatalf("ConfigMap %s differs from base/clusterippolicy.yaml; copy the document (from apiVersion on) into %s/configmap.yaml\ngot:\n%s", cm.Name, policyFileComponent, got)
			}
			return
		}
	}
	t.Fatalf("no ConfigMap %s in %s", policyConfigMap, policyFileComponent)
}

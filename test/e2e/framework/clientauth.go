package framework

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"clusterip-policy/certs"
)

// WebhookClientAuth is the apiservers' identity towards the webhooks
// (Options.WebhookClientAuth): a client CA the webhooks trust
// (--client-ca-file) and a client certificate it signed, which every
// apiserver presents through its admission configuration
// (--admission-control-config-file), as docs/operations.md describes for a
// real cluster.
type WebhookClientAuth struct {
	Dir string
	CA  *certs.CA
	// Client is the identity the apiservers present; tests use it to call
	// a webhook directly.
	Client *Identity
	// Files written into Dir.
	CAFile, CertFile, KeyFile, Kubeconfig, AdmissionConfig string
}

// kubeconfigUser names the kubeconfig entry the apiservers pick for a
// webhook. The apiserver looks up the webhook's host:port (a Service
// webhook: name.namespace.svc:port), then "*."-prefixed suffixes, then "*"
// (k8s.io/apiserver/pkg/util/webhook, defaultAuthenticationInfoResolver).
// The harness picks the webhooks' ports after the apiservers have started,
// so it can only use "*"; a real cluster names the Service.
const kubeconfigUser = "*"

// NewWebhookClientAuth writes the client CA, the apiservers' client
// certificate, the kubeconfig naming it, and the AdmissionConfiguration
// pointing both webhook admission plugins at that kubeconfig, into dir.
func NewWebhookClientAuth(dir string) (*WebhookClientAuth, error) {
	abs, err := filepath.Abs(dir) // the apiserver wants absolute paths
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, err
	}
	ca, err := certs.NewCA("clusterip-policy-e2e-apiserver-client-ca", certValidity)
	if err != nil {
		return nil, err
	}
	const user = "kube-apiserver-admission"
	kp, err := ca.Sign(certs.Options{CommonName: user, Validity: certValidity, Client: true})
	if err != nil {
		return nil, err
	}
	a := &WebhookClientAuth{
		Dir:             abs,
		CA:              ca,
		Client:          &Identity{User: user, Cert: kp},
		CAFile:          filepath.Join(abs, "client-ca.crt"),
		CertFile:        filepath.Join(abs, "apiserver-client.crt"),
		KeyFile:         filepath.Join(abs, "apiserver-client.key"),
		Kubeconfig:      filepath.Join(abs, "webhook-client.kubeconfig"),
		AdmissionConfig: filepath.Join(abs, "admission-config.yaml"),
	}
	kubeconfig := clientcmdapi.NewConfig()
	kubeconfig.AuthInfos[kubeconfigUser] = &clientcmdapi.AuthInfo{ClientCertificate: a.CertFile, ClientKey: a.KeyFile}
	kc, err := clientcmd.Write(*kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("encode webhook client kubeconfig: %w", err)
	}
	for _, f := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{
		{a.CAFile, ca.CertPEM, 0o644},
		{a.CertFile, kp.CertPEM, 0o644},
		{a.KeyFile, kp.KeyPEM, 0o600},
		{a.Kubeconfig, kc, 0o600},
		{a.AdmissionConfig, []byte(AdmissionConfiguration(a.Kubeconfig)), 0o644},
	} {
		if err := certs.WriteFileAtomic(f.path, f.data, f.mode); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// AdmissionConfiguration is the file given to kube-apiserver's
// --admission-control-config-file: both webhook admission plugins read the
// credentials they present to webhooks from kubeconfig (an absolute path).
func AdmissionConfiguration(kubeconfig string) string {
	return fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: ValidatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: %[1]q
- name: MutatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: %[1]q
`, kubeconfig)
}

// APIServerArgs are the apiserver flags that make it present the client
// certificate; none when a is nil (client authentication off).
func (a *WebhookClientAuth) APIServerArgs(extra []string) []string {
	if a == nil {
		return extra
	}
	return slices.Concat(extra, []string{"--admission-control-config-file=" + a.AdmissionConfig})
}

// WebhookArgs are the webhook flags that make it require the client
// certificate; none when a is nil.
func (a *WebhookClientAuth) WebhookArgs() []string {
	if a == nil {
		return nil
	}
	return []string{"--client-ca-file=" + a.CAFile}
}

// Identity is the certificate to present to a webhook: the apiservers'
// client certificate, or nil when client authentication is off.
func (a *WebhookClientAuth) Identity() *Identity {
	if a == nil {
		return nil
	}
	return a.Client
}

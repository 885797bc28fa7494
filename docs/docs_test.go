package docs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"clusterip-policy/internal/testutil"
	"clusterip-policy/pkg/policy"
)

// The tests run in docs/; paths below are from the repository's root.
const root = ".."

// cliPackage is where `make build` builds bin/clusterip-policy from.
const cliPackage = "./cmd/webhook"

// docFiles are the pages these tests hold honest: the README, BENCHMARKS.md,
// RELIABILITY.md, CHANGELOG.md (the release note), the chart's README, docs/ and docs/providers/.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	// The provider pages too: an install check or a --set value given
	// there is held to what the chart and the tests do, as anywhere.
	providers, err := filepath.Glob(filepath.Join(root, "docs", "providers", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, providers...)
	sort.Strings(files)
	// The README first, then the measurements' pages and the page a chart
	// index shows, then docs/.
	return append([]string{
		filepath.Join(root, "README.md"),
		filepath.Join(root, "BENCHMARKS.md"),
		filepath.Join(root, "RELIABILITY.md"),
		filepath.Join(root, "CHANGELOG.md"),
		filepath.Join(root, "charts", "clusterip-policy", "README.md"),
	}, files...)
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// rel names a file as the repository does, for messages.
func rel(path string) string {
	r, err := filepath.Rel(root, path)
	if err != nil {
		return path
	}
	return filepath.ToSlash(r)
}

// brokenLinks returns each relative link of the page at path whose file, or
// whose #anchor in a Markdown file, does not exist. Links to other sites
// are not followed.
func brokenLinks(path, text string) []string {
	var out []string
	anchorsOf := map[string]map[string]bool{}
	for _, l := range Links(text) {
		target := l.Target
		if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		file, anchor, _ := strings.Cut(target, "#")
		dest := path
		if file != "" {
			dest = filepath.Join(filepath.Dir(path), filepath.FromSlash(file))
			if _, err := os.Stat(dest); err != nil {
				out = append(out, fmt.Sprintf("%s:%d: %s: no such file %s", rel(path), l.Line, target, rel(dest)))
				continue
			}
		}
		if anchor == "" {
			continue
		}
		if !strings.HasSuffix(dest, ".md") {
			out = append(out, fmt.Sprintf("%s:%d: %s: an anchor into a file that is not Markdown", rel(path), l.Line, target))
			continue
		}
		a, ok := anchorsOf[dest]
		if !ok && dest == path {
			a, ok = Anchors(text), true
			anchorsOf[dest] = a
		}
		if !ok {
			b, err := os.ReadFile(dest)
			if err != nil {
				out = append(out, fmt.Sprintf("%s:%d: %s: %v", rel(path), l.Line, target, err))
				continue
			}
			a = Anchors(string(b))
			anchorsOf[dest] = a
		}
		if !a[anchor] {
			out = append(out, fmt.Sprintf("%s:%d: %s: %s has no heading with the anchor #%s", rel(path), l.Line, target, rel(dest), anchor))
		}
	}
	return out
}

func TestRelativeLinksResolve(t *testing.T) {
	for _, f := range docFiles(t) {
		for _, p := range brokenLinks(f, read(t, f)) {
			t.Error(p)
		}
	}
}

// The link check must see a broken file, a broken anchor and a good pair.
func TestRelativeLinksReportsWhatIsBroken(t *testing.T) {
	page := filepath.Join(root, "docs", "page.md")
	text := "# Page\n\n## A heading (`x`)\n\n[ok](#a-heading-x) [ok](policy.md#the-object) [gone](nothing.md) [bad](policy.md#no-such-heading) [self](#no-such)\n`[code](nothing.md)`\n```sh\n[block](nothing.md)\n```\n"
	got := brokenLinks(page, text)
	want := []string{
		"docs/page.md:5: nothing.md: no such file docs/nothing.md",
		"docs/page.md:5: policy.md#no-such-heading: docs/policy.md has no heading with the anchor #no-such-heading",
		"docs/page.md:5: #no-such: docs/page.md has no heading with the anchor #no-such",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestAnchorsFollowGitHub(t *testing.T) {
	for text, want := range map[string]string{
		"The apiserver's audit annotations":                              "the-apiservers-audit-annotations",
		"A local cluster (`make demo`)":                                  "a-local-cluster-make-demo",
		"Memory at 100,000 allocated addresses":                          "memory-at-100000-allocated-addresses",
		"Break-glass: the webhook is down":                               "break-glass-the-webhook-is-down",
		"`clusterip-policy review`":                                      "clusterip-policy-review",
		"Only the apiservers may call the webhook (client certificates)": "only-the-apiservers-may-call-the-webhook-client-certificates",
		"See [policy.md](policy.md)":                                     "see-policymd",
	} {
		if got := Anchor(text); got != want {
			t.Errorf("Anchor(%q) = %q, want %q", text, got, want)
		}
	}
	a := Anchors("# T\n## Same\n```\n## not a heading\n```\n## Same\n")
	for _, want := range []string{"t", "same", "same-1"} {
		if !a[want] {
			t.Errorf("Anchors lacks %q: %v", want, a)
		}
	}
	if a["not-a-heading"] {
		t.Error("a line in a code block was taken for a heading")
	}
}

// how says how a command shown in a shell block is kept honest: run by a
// test (test names a Go test function; evidence is text the file defining
// it must contain, so the mapping breaks when the test stops doing it), or
// named in a file CI runs (file, evidence), or not run, with the reason.
type how struct {
	test, file, evidence string
	notRun               string
}

const (
	noKubelet   = "needs the webhook's pods running: the e2e harness has no kubelet, so the tests run the binary as the Deployment does instead"
	realCluster = "changes a real cluster that runs the webhook; "
	certManager = "needs cert-manager in the cluster; the overlay is only built (manifests/overlays_test.go)"
	measurement = "a measurement: minutes of load on a quiet machine (make bench-smoke runs the harness once with tiny numbers)"
	gke         = "needs a GKE project (gcloud and a private cluster); the port it opens is the chart's ports.webhook, tested with the chart"
)

// documented maps every command line of a sh, bash or console block in the
// README and docs/*.md (as Commands normalizes it) to how it is kept honest.
// Console commands that start with "clusterip-policy " are not listed: they
// run in TestConsoleExamplesMatchTheBinary, output compared.
var documented = map[string]how{
	// README
	"make demo": {test: "TestMakeUpDemoDown", evidence: `"demo.sh"`},
	"make test": {file: ".ci/run", evidence: "\nmake test\n"},
	"apt-get install haproxy prometheus docker-registry": {test: "TestMakeTestPackagesAreCIs", evidence: "need+=("},
	"make build": {file: "Makefile", evidence: "\nbuild: ##"},
	"bin/clusterip-policy review --policy examples/clusterippolicy.yaml examples/services/": {test: "TestOfflineCommandsRun", evidence: `"bin/clusterip-policy review "`},
	"make release IMAGE_REPO=registry.example.com/clusterip-policy":                         {test: "TestNodeReadmeInstall", evidence: "readmeInstallBlock(t, n.root)"},
	"V=$(make -s version)": {test: "TestReleaseArtefacts", evidence: `run(t, root, "make", "-s", "version")`},
	"skopeo copy --all oci-archive:_output/release/clusterip-policy-$V.oci.tar docker://registry.example.com/clusterip-policy:$V":                                                                                              {test: "TestReleaseArtefacts", evidence: `readmeCommand(t, install, "skopeo copy ")`},
	"helm push _output/release/clusterip-policy-${V#v}.tgz oci://registry.example.com/charts":                                                                                                                                  {test: "TestNodeReadmeInstall", evidence: "readmeInstallBlock(t, n.root)"},
	"helm install clusterip-policy oci://registry.example.com/charts/clusterip-policy --version ${V#v} -n clusterip-policy --set dns.clusterIP=$(kubectl -n kube-system get service kube-dns -o jsonpath='{.spec.clusterIP}')": {test: "TestNodeReadmeInstall", evidence: "readmeInstallBlock(t, n.root)"},
	"kubectl get clusterippolicy default -o jsonpath='{.status.conditions[?(@.type==\"WebhookReachable\")].message}'":                                                                                                          {notRun: "test/e2e/arming_test.go reads the same condition through the API"},
	"kubectl create namespace clusterip-policy":                                               {test: "TestNodeReadmeInstall", evidence: "readmeInstallBlock(t, n.root)"},
	"kubectl label namespace clusterip-policy pod-security.kubernetes.io/enforce=restricted":  {test: "TestNodeReadmeInstall", evidence: "readmeInstallBlock(t, n.root)"},
	"kubectl -n clusterip-policy rollout status deploy/clusterip-policy-webhook --timeout=3m": {test: "TestNodeReadmeInstall", evidence: "readmeInstallBlock(t, n.root)"},
	"kubectl -n clusterip-policy rollout status deploy/clusterip-policy-webhook":              {test: "TestNodeKustomizeSelfSigned", evidence: "n.rotateCAAsDocumented(t, ctx, wrap, overlay)"},
	"kubectl wait --for=condition=WebhookReachable clusterippolicy/default --timeout=2m":      {test: "TestNodeReadmeInstall", evidence: "readmeInstallBlock(t, n.root)"},

	// docs/install.md
	"make certs": {test: "TestDeploymentManifests", evidence: "gencerts"},
	"kubectl apply --server-side -f manifests/base/crd.yaml":                                                                                                                                                 {test: "TestDeploymentManifests", evidence: `"crd.yaml"`},
	"kubectl wait --for=condition=Established crd/clusterippolicies.clusterip-policy.io --timeout=1m":                                                                                                        {test: "TestDeploymentManifests", evidence: `"--for=condition=Established", "crd/clusterippolicies.clusterip-policy.io"`},
	"kubectl apply --server-side -k manifests/base -l 'app.kubernetes.io/component!=webhook-configuration'":                                                                                                  {test: "TestNodeKustomizeBase", evidence: `installBlockWith(t, n.root, "kubectl apply --server-side --force-conflicts -k manifests/base")`},
	"kubectl apply --server-side --force-conflicts -k manifests/base":                                                                                                                                        {test: "TestNodeKustomizeBase", evidence: `installBlockWith(t, n.root, "kubectl apply --server-side --force-conflicts -k manifests/base")`},
	"kubectl -n clusterip-policy get secret clusterip-policy-webhook-tls -o jsonpath='{.data.tls\\.crt}' | base64 -d | openssl x509 -noout -serial -enddate":                                                 {notRun: realCluster + "TestManagedCertificatesBootstrapAndRestart reads the same Secret and the certificate served"},
	"kubectl apply --server-side -k manifests/overlays/self-signed -l 'app.kubernetes.io/component!=webhook-configuration'":                                                                                  {test: "TestNodeKustomizeSelfSigned", evidence: `installBlockWith(t, n.root, "kubectl apply --server-side --force-conflicts -k manifests/overlays/self-signed")`},
	"kubectl -n clusterip-policy wait certificate/clusterip-policy-webhook --for=condition=Ready --timeout=2m":                                                                                               {notRun: certManager},
	"kubectl apply --server-side -k manifests/overlays/cert-manager -l 'app.kubernetes.io/component!=webhook-configuration'":                                                                                 {notRun: certManager},
	"kubectl apply --server-side --force-conflicts -k manifests/overlays/cert-manager":                                                                                                                       {notRun: certManager},
	"kubectl diff --server-side --force-conflicts -k my-cluster":                                                                                                                                             {test: "TestNodeKustomizeSelfSigned", evidence: "n.rotateCAAsDocumented(t, ctx, wrap, overlay)"},
	"kubectl apply --server-side --force-conflicts -k my-cluster":                                                                                                                                            {test: "TestNodeKustomizeSelfSigned", evidence: "n.rotateCAAsDocumented(t, ctx, wrap, overlay)"},
	"kubectl delete mutatingwebhookconfiguration,validatingwebhookconfiguration,validatingadmissionpolicybinding -l 'app.kubernetes.io/name=clusterip-policy-webhook,clusterip-policy.io/break-glass!=keep'": {test: "TestArmingTheFailurePolicy", evidence: "emergencyArgs(t, c.Root)"},
	"kubectl delete -k manifests/overlays/self-signed --ignore-not-found":                                                                                                                                    {test: "TestNodeKustomizeSelfSigned", evidence: `"delete", "-k", wrap, "--ignore-not-found"`},
	"kubectl delete validatingadmissionpolicy,mutatingadmissionpolicy,mutatingadmissionpolicybinding -l app.kubernetes.io/name=clusterip-policy-webhook":                                                     {test: "TestNodeKustomizeSelfSigned", evidence: `"delete", "validatingadmissionpolicy,mutatingadmissionpolicy,mutatingadmissionpolicybinding"`},
	`helm upgrade clusterip-policy ... --reuse-values --set-json 'webhook.namespaceSelector={"matchExpressions":[{"key":"clusterip-policy.io/excluded","operator":"DoesNotExist"}]}'`:                        {test: "TestChartNamespaceSelector", evidence: `webhook.namespaceSelector={"matchExpressions":[{"key":"clusterip-policy.io/excluded","operator":"DoesNotExist"}`},
	"kubectl label namespace batch clusterip-policy.io/excluded=true":                                                                                                                                        {test: "TestExclusionByLabelReachesHoldsAndAudit", evidence: `"label", "namespace", ns, arg`},
	"helm upgrade clusterip-policy oci://registry.example.com/charts/clusterip-policy --version NEW -n clusterip-policy --reuse-values":                                                                      {test: "TestHelmChart", evidence: `"upgrade", "clusterip-policy", "charts/clusterip-policy", "--namespace", "clusterip-policy", "--reuse-values"`},
	"kubectl apply --server-side --force-conflicts -f charts/clusterip-policy/crds/clusterippolicies.yaml":                                                                                                   {test: "TestHelmChart", evidence: `"apply", "--server-side", "--force-conflicts", "-f", "-"`},

	// docs/node.md
	"apt-get install -y containerd runc containernetworking-plugins iproute2 iptables docker-registry jq": {file: ".ci/run", evidence: "need+=(containernetworking-plugins)"},
	"make node-up":              {file: "hack/node-e2e.sh", evidence: "hack/node-up.sh"},
	"make node-down":            {file: "hack/node-e2e.sh", evidence: "hack/node-down.sh"},
	". .local/node/env":         {test: "TestNodeChartFromRegistry", evidence: "NODE_ENV"},
	"kubectl get nodes -o wide": {notRun: "a look at the node for the reader; node-up waits for it to be Ready through the API"},
	"export KUBECONFIG=$NODE_KUBECONFIG PATH=$PWD/.local/bin:$PATH": {notRun: "sets up the reader's shell; the node tests read the same values from .local/node/env"},
	// docs/providers/
	"gcloud container clusters describe CLUSTER --format='value(privateClusterConfig.masterIpv4CidrBlock)'":                                                                       {notRun: gke},
	"gcloud compute firewall-rules list --filter=\"name~gke-CLUSTER-[0-9a-z]*-master\" --format='value(targetTags)'":                                                              {notRun: gke},
	"gcloud compute firewall-rules create gke-CLUSTER-clusterip-policy --network NETWORK --direction INGRESS --source-ranges MASTER_CIDR --target-tags NODE_TAG --allow tcp:9443": {notRun: gke},
	"helm install clusterip-policy ... --set hostNetwork=true --set ports.webhook=10443 --set ports.health=10444 --set ports.metrics=10445":                                       {test: "TestHelmRefusesHostNetworkInARestrictedNamespace", evidence: `eks := []string{"--set", "hostNetwork=true", "--set", "ports.webhook=10443", "--set", "ports.health=10444", "--set", "ports.metrics=10445"}`},
	"kubectl get validatingwebhookconfiguration clusterip-policy -o jsonpath='{.webhooks[0].namespaceSelector}'":                                                                  {notRun: "a look at what AKS's admission enforcer added; the chart's own selector is checked by manifests/helm_test.go"},
	"helm install clusterip-policy oci://$NODE_REGISTRY/charts/clusterip-policy --version VERSION --plain-http -n clusterip-policy --create-namespace --wait --set dns.clusterIP=10.96.0.10 --set-json \"extraEnv=[{\\\"name\\\":\\\"KUBERNETES_SERVICE_HOST\\\",\\\"value\\\":\\\"$NODE_APISERVER_HOST\\\"},{\\\"name\\\":\\\"KUBERNETES_SERVICE_PORT\\\",\\\"value\\\":\\\"$NODE_APISERVER_PORT\\\"}]\"": {test: "TestNodeChartFromRegistry", evidence: `"install", "clusterip-policy", chart, "--version", version, "--plain-http"`},
	"kubectl -n clusterip-policy logs -l app.kubernetes.io/name=clusterip-policy-webhook --prefix":               {test: "TestNodeChartFromRegistry", evidence: `"logs", "-l", "app.kubernetes.io/name=clusterip-policy-webhook", "--tail=20", "--prefix"`},
	"helm uninstall clusterip-policy -n clusterip-policy --wait":                                                 {test: "TestHelmChart", evidence: `"uninstall", "clusterip-policy", "--namespace", "clusterip-policy", "--wait"`},
	"kubectl get clusterippolicy default -o yaml > clusterippolicy-backup.yaml":                                  {test: "TestHelmChart", evidence: `"get", "clusterippolicy", "default", "-o", "yaml"`},
	"kubectl delete crd clusterippolicies.clusterip-policy.io":                                                   {test: "TestHelmChart", evidence: `{"delete", "crd", "clusterippolicies.clusterip-policy.io"}`},
	"kubectl -n clusterip-policy delete lease clusterip-policy-leader clusterip-policy-holds --ignore-not-found": {test: "TestHelmChart", evidence: `{"-n", "clusterip-policy", "delete", "lease", "clusterip-policy-leader", "clusterip-policy-holds", "--ignore-not-found"}`},
	"kubectl delete ipaddresses -l ipaddress.kubernetes.io/managed-by=clusterip-policy.io":                       {test: "TestHelmChart", evidence: `{"delete", "ipaddresses", "-l", "ipaddress.kubernetes.io/managed-by=clusterip-policy.io"}`},
	"kubectl delete namespace clusterip-policy":                                                                  {notRun: realCluster + "deleting a namespace waits for the namespace controller, which the harness does not run"},

	// docs/operations.md
	"clusterip-policy audit --policy clusterippolicy.yaml -o json | jq -r '.counts | to_entries[] | select(.value > 0) | \"\\(.key) \\(.value)\"'":                                                                                                                                                                     {notRun: "reads a real cluster; TestAuditReportsExistingServicesThatBreakThePolicy runs the audit, and internal/cli's tests pin its JSON keys"},
	"helm template clusterip-policy charts/clusterip-policy -n clusterip-policy --kube-version 1.37.0 --set dns.clusterIP=10.96.0.10 --set networkPolicy.enabled=true --set-json 'networkPolicy.webhookFrom=[{\"ipBlock\":{\"cidr\":\"10.0.0.0/28\"}}]' --show-only templates/networkpolicy.yaml > networkpolicy.yaml": {test: "TestOfflineCommandsRun", evidence: "helm template clusterip-policy"},
	"kubectl -n clusterip-policy get lease clusterip-policy-leader clusterip-policy-holds":                                                                                                                                                                                                                             {notRun: realCluster + "read-only; the e2e tests read the Lease through the API (test/e2e/holds_test.go)"},
	"kubectl get validatingwebhookconfiguration clusterip-policy -o jsonpath='{.metadata.annotations.clusterip-policy\\.io/match-conditions-policy}{\"\\n\"}'":                                                                                                                                                         {test: "TestManagedConditionsSendOnlyWhatTheWebhookMayChange", evidence: `"get", "validatingwebhookconfiguration", "clusterip-policy", "-o", ` + "`jsonpath={.metadata.annotations.clusterip-policy\\.io/match-conditions-policy}`"},
	"kubectl patch mutatingwebhookconfiguration clusterip-policy --type=json -p='[{\"op\":\"replace\",\"path\":\"/webhooks/0/failurePolicy\",\"value\":\"Ignore\"}]'":                                                                                                                                                  {test: "TestDeploymentManifests", evidence: `"patch", p.kind, "clusterip-policy", "--type=json"`},
	"kubectl patch validatingwebhookconfiguration clusterip-policy --type=json -p='[{\"op\":\"replace\",\"path\":\"/webhooks/0/failurePolicy\",\"value\":\"Ignore\"}]'":                                                                                                                                                {test: "TestDeploymentManifests", evidence: `"patch", p.kind, "clusterip-policy", "--type=json"`},
	"kubectl patch validatingwebhookconfiguration clusterip-policy --type=json -p='[{\"op\":\"replace\",\"path\":\"/webhooks/1/failurePolicy\",\"value\":\"Ignore\"}]'":                                                                                                                                                {test: "TestNodeKustomizeSelfSigned", evidence: "n.breakGlassAsDocumented(t, ctx, wrap)"},
	"kubectl apply --server-side --force-conflicts -k manifests/overlays/self-signed":                                                                                                                                                                                                                                  {test: "TestNodeKustomizeSelfSigned", evidence: `installBlockWith(t, n.root, "kubectl apply --server-side --force-conflicts -k manifests/overlays/self-signed")`},
	"go run ./certs/cmd/gencerts --reuse-ca":                                                                 {test: "TestNodeKustomizeSelfSigned", evidence: "n.rotateCAAsDocumented(t, ctx, wrap, overlay)"},
	"go run ./certs/cmd/gencerts --new-ca":                                                                   {test: "TestNodeKustomizeSelfSigned", evidence: "n.rotateCAAsDocumented(t, ctx, wrap, overlay)"},
	"kubectl -n clusterip-policy rollout restart deploy/clusterip-policy-webhook":                            {test: "TestNodeKustomizeSelfSigned", evidence: "n.rotateCAAsDocumented(t, ctx, wrap, overlay)"},
	"old=$(kubectl -n clusterip-policy get pods -l app.kubernetes.io/name=clusterip-policy-webhook -o name)": {test: "TestNodeKustomizeSelfSigned", evidence: "n.rotateCAAsDocumented(t, ctx, wrap, overlay)"},
	"kubectl -n clusterip-policy wait --for=delete $old --timeout=5m":                                        {test: "TestNodeKustomizeSelfSigned", evidence: "n.rotateCAAsDocumented(t, ctx, wrap, overlay)"},
	"openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout client-ca.key -out client-ca.crt -days 3650 -subj \"/CN=clusterip-policy-apiserver-client-ca\" -addext \"basicConstraints=critical,CA:TRUE\" -addext \"keyUsage=critical,keyCertSign,cRLSign\"": {notRun: "makes the reader's client CA; TestWebhookRequiresTheAPIServersClientCertificate makes its certificates with Go's crypto/x509"},
	"openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout webhook-client.key -out webhook-client.csr -subj \"/CN=kube-apiserver-admission\"":                                                                                                                    {notRun: "as the client CA above"},
	"openssl x509 -req -in webhook-client.csr -CA client-ca.crt -CAkey client-ca.key -CAcreateserial -out webhook-client.crt -days 365 -extfile <(printf \"basicConstraints=CA:FALSE\\nkeyUsage=critical,digitalSignature\\nextendedKeyUsage=clientAuth\\n\")":                              {notRun: "as the client CA above"},
	"kubectl -n clusterip-policy create secret generic clusterip-policy-client-ca --from-file=ca.crt=client-ca.crt":                                                                                                                                                                         {notRun: realCluster + "the component's mount is checked by manifests/components_test.go"},

	// docs/observability.md
	"TOKEN=$(kubectl -n monitoring create token prometheus-k8s)":                         {notRun: noKubelet + "; TestSecureMetricsAnswerOnlyAnAuthorizedToken makes a service account token with a TokenRequest, as kubectl create token does"},
	"kubectl -n clusterip-policy port-forward deploy/clusterip-policy-webhook 8080 &":    {notRun: noKubelet},
	"curl -sk -H \"Authorization: Bearer $TOKEN\" https://127.0.0.1:8080/metrics | head": {notRun: noKubelet + "; TestSecureMetricsAnswerOnlyAnAuthorizedToken scrapes the metrics port so, over HTTPS without verifying the self-signed certificate, with a bearer token"},

	// docs/why-refused.md
	"kubectl -n clusterip-policy logs -l app.kubernetes.io/name=clusterip-policy-webhook --tail=-1 --max-log-requests=10 | jq -c 'select(.logger==\"audit\" and .decision==\"denied\") | {ts, stage, namespace, name, user, rules, message}'":                                                                                         {test: "TestNodeKustomizeSelfSigned", evidence: "whyRefusedLogsCommand(t, n.root)"},
	"jq -c 'select(.annotations[\"mutate-services.clusterip-policy.io/decision\"]==\"denied\" or .annotations[\"validate-services.clusterip-policy.io/decision\"]==\"denied\" or .annotations[\"validate-servicecidrs.clusterip-policy.io/decision\"]==\"denied\") | {verb, objectRef, user: .user.username, annotations}' audit.log": {notRun: "reads the apiserver's audit log; TestAuditAnnotationsInAPIServerAuditLog finds these annotations in one"},

	// docs/development.md
	"export KUBECONFIG=.local/kubeconfig PATH=$PWD/.local/bin:$PATH":        {notRun: "sets the reader's shell up for the local cluster"},
	"kubectl create service clusterip web --tcp=80 --clusterip=10.96.200.5": {test: "TestMakeUpDemoDown", evidence: "10.96.200.5"},
	"kubectl create service clusterip web --tcp=80 --clusterip=10.96.0.30":  {notRun: "an allowed static-band create on the local cluster; the demo creates 10.96.0.20 the same way"},
	"go test -tags e2e -count=1 -v -run 'TestPolicyObject' ./test/e2e/":     {file: "Makefile", evidence: "-tags e2e -count=1"},
	"make bench-e2e": {file: "Makefile", evidence: "bench-smoke"},
	// BENCHMARKS.md, "Holding a reserved range": the test is one of make e2e's
	"make build && go test -tags e2e -count=1 -v -run '^TestHoldingASlash22ReservedRange$' ./test/e2e/": {test: "TestHoldingASlash22ReservedRange", evidence: "slash22Policy"},
	"make bench-e2e BENCH_ROUNDS=5 BENCH_CREATES=1000":                                                  {notRun: "a longer run of the harness `make bench-smoke` runs in make test"},
	"make bench-e2e BENCH_ARGS='--hold-reservations'":                                                   {notRun: "the harness of `make bench-smoke` with another flag"},
	"make bench-e2e BENCH_EXISTING=0 BENCH_CONFIGS=none,ours BENCH_WORKLOADS=dynamic:8":                 {notRun: "the harness of `make bench-smoke` with fewer configurations"},

	// docs/matchconditions.md (the loop is one command per line)
	"for kind in mutatingwebhookconfiguration validatingwebhookconfiguration; do":                                      {notRun: realCluster + "removes the managed condition by hand; the leader's own removal is TestUnmanagedConditionsStayStatic"},
	"kubectl get $kind clusterip-policy -o json |":                                                                     {notRun: "part of the loop above"},
	"jq '(.webhooks[] | select(.matchConditions) | .matchConditions) |= map(select(.name != \"policy-may-apply\"))' |": {notRun: "part of the loop above"},
	"kubectl replace -f -": {notRun: "part of the loop above"},
	"done":                 {notRun: "part of the loop above"},

	// docs/performance.md
	"make up": {test: "TestMakeUpDemoDown", evidence: `"local-up.sh"`},
	"go run ./test/ipaddresses --count 100000":         {notRun: "a memory measurement on the local cluster (BENCHMARKS.md)"},
	"go run ./test/ipaddresses --delete":               {notRun: "undoes the command above"},
	"make build && cp bin/clusterip-policy /tmp/after": {notRun: "the binary a memory measurement compares (BENCHMARKS.md)"},
	"E2E_MEMORY_BINARIES=before=/tmp/before,after=/tmp/after,before-again=/tmp/before,after-again=/tmp/after go test -tags e2e -count=1 -v -timeout 60m -run 'TestMemoryWithEveryRoleAtScale$' ./test/e2e/": {notRun: "a memory measurement: 100,000 IPAddresses, minutes (BENCHMARKS.md)"},
	"hack/cpu-compare.sh": {notRun: "a CPU measurement (BENCHMARKS.md); minutes of load"},
	"go test ./internal/admission -run '^$' -bench DecodeServiceFields -benchmem": {notRun: "a benchmark; make bench runs those of pkg/"},
	"go test ./internal/admission -run '^$' -bench Endpoint -benchmem":            {notRun: "a benchmark; make bench runs those of pkg/"},

	// docs/architecture.md
	"cat $(ls internal/admission/*.go | grep -v _test) | wc -l":                                                                 {notRun: "counts lines for the reader; nothing to check"},
	"git ls-tree --name-only c19f06f internal/server/ | grep '\\.go$' | grep -v _test | xargs -I{} git show c19f06f:{} | wc -l": {notRun: "counts the lines of an old commit for the reader; a fresh clone may be shallow"},
	"go test ./pkg/policy -run '^$' -bench DynamicCreate -benchmem":                                                             {file: "Makefile", evidence: "-bench . -benchmem ./pkg/..."},

	// BENCHMARKS.md: measurements of minutes of load on a quiet machine;
	// checkNamesUsed holds the targets, knobs and tests they name.
	"BENCH_E2E=1 BENCH_CREATES=400 BENCH_EXISTING=0 BENCH_WORKLOADS=dynamic:1,dynamic:8 BENCH_CONFIGS=none,ours,vap,floor-static,floor-single go test -tags e2e -count=1 -run '^TestBenchE2E$' ./test/bench/":                    {notRun: measurement},
	"BENCH_E2E=1 BENCH_EXISTING=0 BENCH_CREATES=400 BENCH_WORKLOADS=dynamic:1,dynamic:8 BENCH_CONFIGS=none,ours,vap go test -tags e2e -count=1 -timeout 40m -v -run '^TestBenchE2E$' ./test/bench/":                              {notRun: measurement},
	"E2E_WEBHOOK=$OLD/bin/webhook BENCH_E2E=1 BENCH_EXISTING=0 BENCH_CREATES=400 BENCH_WORKLOADS=dynamic:1,dynamic:8 BENCH_CONFIGS=none,ours,vap go test -tags e2e -count=1 -timeout 40m -v -run '^TestBenchE2E$' ./test/bench/": {notRun: measurement + "; of an old commit's binary"},
	"go test -c -o /tmp/scan.test ./cmd/webhook": {notRun: measurement},
	"/usr/bin/time -f \"%U %S\" /tmp/scan.test -test.run '^$' -test.bench 'Endpoint/mutate-static/ours' -test.benchtime 20000x":                                                                     {notRun: measurement},
	"go tool pprof -top -cum .local/bench/profiles/*-ours-*.pprof":                                                                                                                                  {notRun: "reads the profiles of the run above"},
	"make bench-e2e BENCH_CREATES=400 BENCH_EXISTING=0 BENCH_CONFIGS=none,ours,vap,ours-other-mutator BENCH_WORKLOADS=dynamic:1,dynamic:8":                                                          {notRun: measurement},
	"make bench-e2e BENCH_CREATES=400 BENCH_EXISTING=0 BENCH_WORKLOADS=dynamic:1,dynamic:8 BENCH_CONFIGS=none,ours,vap,floor-static,floor-single":                                                   {notRun: measurement},
	"make bench-e2e BENCH_ROUNDS=1 BENCH_CREATES=1500 BENCH_EXISTING=0 BENCH_WORKLOADS=dynamic:8 BENCH_CONFIGS=ours,vap,floor-static,floor-single BENCH_PROFILE=ours,vap,floor-static,floor-single": {notRun: measurement},
	"make up && ROUNDS=5 DURATION=4s hack/cpu-compare.sh":                                                                                                                                           {notRun: measurement},

	// docs/release.md
	"cd tools/vulncheck && go get golang.org/x/vulndb@latest && go mod tidy":                                                                                                         {notRun: "updates the pinned vulnerability database: a change to commit, not a check"},
	"COSIGN_PASSWORD='a long passphrase' cosign generate-key-pair":                                                                                                                   {notRun: "makes the maintainer's own key pair, once; the release check makes a throwaway pair per run the same way, with a random COSIGN_PASSWORD (test/e2e/release_verify_test.go)"},
	"DIGEST=$(_output/tools/imagebuild digest --layout _output/image/clusterip-policy)":                                                                                              {test: "TestReleaseArtefacts", evidence: `releaseDocBlock(t, root, "V=$(make -s version)")`},
	"CHART_DIGEST=$(helm push _output/release/clusterip-policy-${V#v}.tgz oci://registry.example.com/charts 2>&1 | sed -n 's/^Digest: //p')":                                         {test: "TestReleaseArtefacts", evidence: `releaseDocBlock(t, root, "V=$(make -s version)")`},
	"cosign sign --yes --key cosign.key --signing-config hack/cosign/signing-config.json --trusted-root hack/cosign/trusted-root.json registry.example.com/clusterip-policy@$DIGEST": {test: "TestReleaseArtefacts", evidence: `releaseDocBlock(t, root, "V=$(make -s version)")`},
	"cosign attest --yes --key cosign.key --signing-config hack/cosign/signing-config.json --trusted-root hack/cosign/trusted-root.json --type spdxjson --predicate _output/release/clusterip-policy-$V.spdx.json registry.example.com/clusterip-policy@$DIGEST": {test: "TestReleaseArtefacts", evidence: `releaseDocBlock(t, root, "V=$(make -s version)")`},
	"cosign sign --yes --key cosign.key --signing-config hack/cosign/signing-config.json --trusted-root hack/cosign/trusted-root.json registry.example.com/charts/clusterip-policy@$CHART_DIGEST":                                                                {test: "TestReleaseArtefacts", evidence: `releaseDocBlock(t, root, "V=$(make -s version)")`},
	"cosign verify --key cosign.pub --insecure-ignore-tlog=true registry.example.com/clusterip-policy:$V":                                                                                                                                                        {test: "TestReleaseArtefacts", evidence: `releaseDocBlock(t, root, "cosign verify ")`},
	"cosign verify-attestation --key cosign.pub --insecure-ignore-tlog=true --type spdxjson registry.example.com/clusterip-policy:$V":                                                                                                                            {test: "TestReleaseArtefacts", evidence: `releaseDocBlock(t, root, "cosign verify ")`},
	"cosign verify --key cosign.pub --insecure-ignore-tlog=true registry.example.com/charts/clusterip-policy:${V#v}":                                                                                                                                             {test: "TestReleaseArtefacts", evidence: `releaseDocBlock(t, root, "cosign verify ")`},
	"kubectl apply --server-side -f install-crd.yaml":                                                                {test: "TestReleaseArtefacts", evidence: `releaseDocBlock(t, root, "kubectl apply --server-side -f install-crd.yaml")`},
	"kubectl apply --server-side -f install.yaml -l 'app.kubernetes.io/component!=webhook-configuration'":            {test: "TestReleaseArtefacts", evidence: `releaseDocBlock(t, root, "kubectl apply --server-side -f install-crd.yaml")`},
	"kubectl apply --server-side --force-conflicts -f install.yaml":                                                  {test: "TestReleaseArtefacts", evidence: `releaseDocBlock(t, root, "kubectl apply --server-side -f install-crd.yaml")`},
	"kubectl krew install --manifest=clusterip-policy.yaml --archive=kubectl-clusterip_policy-$V-linux-amd64.tar.gz": {test: "TestReleaseArtefacts", evidence: `releaseDocBlock(t, root, "kubectl krew install ")`},
	"ln -s ~/.krew/store/clusterip-policy/$V/kubectl_complete-clusterip_policy ~/.krew/bin/":                         {test: "TestReleaseArtefacts", evidence: `releaseDocBlock(t, root, "ln -s ~/.krew/")`},
}

// documentedCommands returns every command line of the pages, with where
// it is.
func documentedCommands(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, f := range docFiles(t) {
		for _, b := range Blocks(read(t, f)) {
			for _, c := range Commands(b) {
				if b.Info == "console" && strings.HasPrefix(c, "clusterip-policy ") {
					continue
				}
				out[c] = append(out[c], fmt.Sprintf("%s:%d", rel(f), b.Line))
			}
		}
	}
	return out
}

// testFiles maps each Go test function of the repository to its file.
var testFiles = sync.OnceValues(func() (map[string]string, error) {
	out := map[string]string{}
	decl := regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9_]+)\(`)
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".local" || d.Name() == "_output" || d.Name() == ".git") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range decl.FindAllStringSubmatch(string(b), -1) {
			out[m[1]] = p
		}
		return nil
	})
	return out, err
})

// checkHow reports what is wrong with one entry of documented.
func checkHow(c string, h how) error {
	switch {
	case h.notRun != "":
		if h.test != "" || h.file != "" {
			return fmt.Errorf("%q is listed as not run and as run", c)
		}
		return nil
	case h.test != "":
		files, err := testFiles()
		if err != nil {
			return err
		}
		f, ok := files[h.test]
		if !ok {
			return fmt.Errorf("%q: no test function %s in the repository", c, h.test)
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if !strings.Contains(string(b), h.evidence) {
			return fmt.Errorf("%q: %s (%s) does not contain %q; does it still run this?", c, h.test, rel(f), h.evidence)
		}
	case h.file != "":
		b, err := os.ReadFile(filepath.Join(root, h.file))
		if err != nil {
			return err
		}
		if !strings.Contains(string(b), h.evidence) {
			return fmt.Errorf("%q: %s does not contain %q", c, h.file, h.evidence)
		}
	default:
		return fmt.Errorf("%q: listed with neither a test, a file nor a reason", c)
	}
	return nil
}

func TestShellCommandsAreRunOrListed(t *testing.T) {
	found := documentedCommands(t)
	var cmds []string
	for c := range found {
		cmds = append(cmds, c)
	}
	sort.Strings(cmds)
	for _, c := range cmds {
		h, ok := documented[c]
		if !ok {
			t.Errorf("%s: the command %q is neither run by a test nor listed as not run with the reason: add it to documented in docs/docs_test.go", strings.Join(found[c], ", "), c)
			continue
		}
		if err := checkHow(c, h); err != nil {
			t.Error(err)
		}
		for _, err := range checkNamesUsed(c) {
			t.Errorf("%s: %v", strings.Join(found[c], ", "), err)
		}
	}
	for c := range documented {
		if _, ok := found[c]; !ok {
			t.Errorf("documented lists %q, which no page shows any more: remove it", c)
		}
	}
}

func TestCommandsAreReadFromShellBlocks(t *testing.T) {
	page := "```sh\n# a comment\nmake demo   # start it\nkubectl apply \\\n  -f x.yaml\n```\n```console\n$ clusterip-policy bands 10.96.0.0/28\nCIDR ...\n```\n```yaml\nkind: Service\n```\n"
	var got []string
	for _, b := range Blocks(page) {
		got = append(got, Commands(b)...)
	}
	want := []string{"make demo", "kubectl apply -f x.yaml", "clusterip-policy bands 10.96.0.0/28"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("got %q, want %q", got, want)
	}
	if err := checkHow("x", how{test: "TestNoSuchTestAnywhere", evidence: "x"}); err == nil {
		t.Error("an entry naming a missing test passed")
	}
	if err := checkHow("x", how{test: "TestCommandsAreReadFromShellBlocks", evidence: "text this file does not hold" + "!"}); err == nil {
		t.Error("an entry whose evidence is missing passed")
	}
}

// binary builds bin/clusterip-policy once for the tests that run it.
var binary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "docs-test-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "clusterip-policy")
	cmd := exec.Command("go", "build", "-o", bin, cliPackage)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", cliPackage, err, out)
	}
	return bin, nil
})

// consoleExamples returns each "$ clusterip-policy ..." of a console block
// with the output the page shows after it (up to the next prompt).
func consoleExamples(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, f := range docFiles(t) {
		for _, b := range Blocks(read(t, f)) {
			if b.Info != "console" {
				continue
			}
			cur := ""
			for _, l := range b.Lines {
				if c, ok := strings.CutPrefix(strings.TrimSpace(l), "$ "); ok {
					cur = ""
					if strings.HasPrefix(c, "clusterip-policy ") {
						cur = fmt.Sprintf("%s:%d\t%s", rel(f), b.Line, c)
						out[cur] = nil
					}
					continue
				}
				if cur != "" {
					out[cur] = append(out[cur], strings.TrimRight(l, " "))
				}
			}
		}
	}
	return out
}

func TestConsoleExamplesMatchTheBinary(t *testing.T) {
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	examples := consoleExamples(t)
	if len(examples) == 0 {
		t.Fatal("no console example runs clusterip-policy; docs/policy.md shows review and bands")
	}
	for key, want := range examples {
		where, c, _ := strings.Cut(key, "\t")
		args := strings.Fields(strings.TrimPrefix(c, "clusterip-policy "))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Dir = root
		var stdout bytes.Buffer
		cmd.Stdout = &stdout
		err := cmd.Run()
		cancel()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Errorf("%s: %s: %v", where, c, err)
			continue
		}
		var got []string
		for _, l := range strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n") {
			got = append(got, strings.TrimRight(l, " "))
		}
		if strings.Join(got, "\n") != strings.TrimRight(strings.Join(want, "\n"), "\n") {
			t.Errorf("%s: %s prints\n%s\nbut the page shows\n%s", where, c, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

// TestOfflineCommandsRun runs the documented commands that need no cluster
// and are not clusterip-policy itself.
func TestOfflineCommandsRun(t *testing.T) {
	helm := filepath.Join(root, ".local", "bin", "helm")
	if _, err := os.Stat(helm); err != nil {
		testutil.MissingTool(t, "no helm in .local/bin: run make tools (hack/build-tools.sh)")
	}
	helm, _ = filepath.Abs(helm)
	for c := range documentedCommands(t) {
		if strings.HasPrefix(c, "bin/clusterip-policy review ") {
			runReview(t, c)
			continue
		}
		if !strings.HasPrefix(c, "helm template clusterip-policy ") {
			continue
		}
		// The page writes the output to a file; here it is read.
		line, _, _ := strings.Cut(c, " > ")
		cmd := exec.Command("bash", "-c", strings.Replace(line, "helm ", helm+" ", 1))
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("%s: %v\n%s", c, err, out)
			continue
		}
		if !strings.Contains(string(out), "kind: NetworkPolicy") || !strings.Contains(string(out), "10.0.0.0/28") {
			t.Errorf("%s rendered no NetworkPolicy admitting 10.0.0.0/28:\n%s", c, out)
		}
	}
}

func TestCLIPageMatchesHelp(t *testing.T) {
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	fresh := filepath.Join(t.TempDir(), "cli.md")
	cmd := exec.Command("bash", filepath.Join("hack", "generate-cli-doc.sh"), bin, fresh)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/generate-cli-doc.sh: %v\n%s", err, out)
	}
	got := read(t, fresh)
	if committed := read(t, filepath.Join(root, "docs", "cli.md")); committed != got {
		t.Errorf("docs/cli.md differs from the commands' --help: run make generate (hack/generate-cli-doc.sh). The first difference is at line %d", firstDiff(committed, got))
	}
}

func firstDiff(a, b string) int {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			return i + 1
		}
	}
	return min(len(al), len(bl)) + 1
}

// runReview runs a documented `bin/clusterip-policy review` with the binary
// `make build` writes (built here the same way): it must judge every
// Service it is given (exit 0, or 1 when some are denied) and print the
// summary line, not refuse its input (exit 2).
func runReview(t *testing.T, c string) {
	t.Helper()
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Fields(strings.TrimPrefix(c, "bin/clusterip-policy "))
	cmd := exec.Command(bin, args...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && (!errors.As(err, &exit) || exit.ExitCode() != 1) {
		t.Errorf("%s: %v\n%s", c, err, out)
		return
	}
	if !regexp.MustCompile(`(?m)^[0-9]+ Services: [0-9]+ allowed, [0-9]+ denied$`).Match(out) {
		t.Errorf("%s printed no summary line:\n%s", c, out)
	}
}

// TestMakeTestPackagesAreCIs: the packages the README tells a newcomer to
// install for make test are among those .ci/run installs, so CI runs make
// test with nothing more than the README asks for.
func TestMakeTestPackagesAreCIs(t *testing.T) {
	ci := read(t, filepath.Join(root, ".ci", "run"))
	found := false
	for c := range documentedCommands(t) {
		pkgs, ok := strings.CutPrefix(c, "apt-get install ")
		if !ok || strings.Contains(pkgs, "containerd") {
			continue // docs/node.md's line is the node's, checked in documented
		}
		found = true
		for _, p := range strings.Fields(pkgs) {
			if !strings.Contains(ci, "need+=("+p+")") {
				t.Errorf("the docs install %s for make test, which .ci/run does not install (no need+=(%s))", p, p)
			}
		}
	}
	if !found {
		t.Error("no page gives the apt-get install line for make test (README.md's Two commands)")
	}
}

var (
	makeTarget = regexp.MustCompile(`(?:^|&& |; )make (?:-\S+ )*([a-z][a-z0-9-]*)(?:\s|$)`)
	knobUsed   = regexp.MustCompile(`\b((?:BENCH|E2E)_[A-Z0-9_]+)=`)
	runPattern = regexp.MustCompile(`-run '\^?(Test[A-Za-z0-9_]+)`)
)

// checkNamesUsed checks the names a documented command uses, whether a test
// runs it or not: each make target it runs is one the Makefile defines, each
// BENCH_* or E2E_* variable it sets is read under test/ or by the Makefile,
// and the test its -run pattern names exists. A command listed as not run
// (a measurement of minutes) still breaks here when a name it uses goes.
func checkNamesUsed(c string) []error {
	var errs []error
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		return []error{err}
	}
	for _, m := range makeTarget.FindAllStringSubmatch(c, -1) {
		if !bytes.Contains(makefile, []byte("\n"+m[1]+":")) {
			errs = append(errs, fmt.Errorf("%q runs make %s, which the Makefile does not define", c, m[1]))
		}
	}
	for _, m := range knobUsed.FindAllStringSubmatch(c, -1) {
		if !readUnder(m[1], filepath.Join(root, "test"), filepath.Join(root, "Makefile")) {
			errs = append(errs, fmt.Errorf("%q sets %s, which nothing under test/ nor the Makefile reads", c, m[1]))
		}
	}
	files, err := testFiles()
	if err != nil {
		return append(errs, err)
	}
	for _, m := range runPattern.FindAllStringSubmatch(c, -1) {
		found := false
		for name := range files {
			if strings.HasPrefix(name, m[1]) {
				found = true
				break
			}
		}
		if !found {
			errs = append(errs, fmt.Errorf("%q runs -run %s, which no test function matches", c, m[1]))
		}
	}
	return errs
}

// readUnder reports whether a Go file under dir, or the file extra, holds
// name in a string literal ("NAME").
func readUnder(name, dir, extra string) bool {
	if b, err := os.ReadFile(extra); err == nil && bytes.Contains(b, []byte(name)) {
		return true
	}
	found := false
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || found || d.IsDir() || !strings.HasSuffix(p, ".go") {
			return nil
		}
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(`"`+name+`"`)) {
			found = true
		}
		return nil
	})
	return found
}

func TestCheckNamesUsedReportsWhatIsGone(t *testing.T) {
	for c, want := range map[string]int{
		"make bench-e2e BENCH_ROUNDS=5":                        0,
		"make no-such-target":                                  1,
		"make up && ROUNDS=5 hack/cpu-compare.sh":              0,
		"BENCH_NO_SUCH_KNOB=1 go test ./test/bench/":           1,
		"go test -tags e2e -run '^TestNoSuchTestAnywhere$' ./": 1,
		"go test -tags e2e -run '^TestBenchE2E$' ./test/bench": 0,
	} {
		if got := checkNamesUsed(c); len(got) != want {
			t.Errorf("checkNamesUsed(%q) = %v, want %d errors", c, got, want)
		}
	}
}

// TestAPIReferenceIsGenerated: docs/api.md is what crd-ref-docs makes of the
// API's Go types now, so the reference never lags a field.
func TestAPIReferenceIsGenerated(t *testing.T) {
	gen := filepath.Join(root, ".local", "bin", "crd-ref-docs")
	if _, err := os.Stat(gen); err != nil {
		testutil.MissingTool(t, "no crd-ref-docs in .local/bin: run make tools (hack/build-tools.sh)")
	}
	fresh := filepath.Join(t.TempDir(), "api.md")
	cmd := exec.Command("bash", filepath.Join("hack", "generate-api-doc.sh"), fresh)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/generate-api-doc.sh: %v\n%s", err, out)
	}
	got := read(t, fresh)
	if committed := read(t, filepath.Join(root, "docs", "api.md")); committed != got {
		t.Errorf("docs/api.md differs from the API's Go types: run make generate (hack/generate-api-doc.sh). The first difference is at line %d", firstDiff(committed, got))
	}
}

// TestInstallPageNamesEveryGrant: each resource a Role or ClusterRole of
// manifests/base/rbac.yaml grants is named in install.md's table of what the
// base installs, so the page an operator reviews before installing lists
// every grant.
func TestInstallPageNamesEveryGrant(t *testing.T) {
	rbac := read(t, filepath.Join(root, "manifests", "base", "rbac.yaml"))
	install := read(t, filepath.Join(root, "docs", "install.md"))
	res := regexp.MustCompile(`(?m)^\s*resources: \[(.*)\]`)
	seen := 0
	for _, m := range res.FindAllStringSubmatch(rbac, -1) {
		for _, r := range strings.Split(m[1], ",") {
			r = strings.Trim(strings.TrimSpace(r), `"`)
			seen++
			if !strings.Contains(install, "`"+r+"`") {
				t.Errorf("manifests/base/rbac.yaml grants on %s, which docs/install.md's table does not name", r)
			}
		}
	}
	if seen < 10 {
		t.Fatalf("read %d resources from manifests/base/rbac.yaml; the pattern no longer matches it", seen)
	}
}

// TestEveryRuleIsOnEachOfItsPages: each public rule ID is on the three pages
// that each say one thing of every rule (what each stage catches, the words
// of a refusal, the audit's fix for the rules it reports: policy.AuditRules),
// so a new rule cannot be left off one.
func TestEveryRuleIsOnEachOfItsPages(t *testing.T) {
	for page, rules := range map[string][]policy.RuleID{"rules.md": policy.Rules, "why-refused.md": policy.Rules, "operations.md": policy.AuditRules} {
		text := read(t, filepath.Join(root, "docs", page))
		for _, r := range rules {
			if !strings.Contains(text, "| `"+string(r)+"` |") {
				t.Errorf("docs/%s has no table row for the rule %s", page, r)
			}
		}
	}
}

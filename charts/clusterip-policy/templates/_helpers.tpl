{{/* Labels every object carries, as the base's kustomization adds them. */}}
{{- define "clusterip-policy.labels" -}}
{{- with include "clusterip-policy.commonLabels" . }}{{ . }}
{{ end -}}
app.kubernetes.io/name: clusterip-policy-webhook
app.kubernetes.io/part-of: clusterip-policy
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/*
commonLabels go on every object and every pod (admission policies of other
tools often require a team or cost-center label). The chart's own keys stay
its own: one of them among commonLabels is refused with the fix.
*/}}
{{- define "clusterip-policy.commonLabels" -}}
{{- $lines := list }}
{{- range $k, $v := .Values.commonLabels }}
{{- if has $k (list "app.kubernetes.io/name" "app.kubernetes.io/part-of" "app.kubernetes.io/managed-by" "app.kubernetes.io/component" "helm.sh/chart") }}
{{- fail (printf "commonLabels.%s: the chart sets this label itself (selectors and the emergency command rely on it); choose another key" $k) }}
{{- end }}
{{- $lines = append $lines (printf "%s: %s" $k ($v | toString | quote)) }}
{{- end }}
{{- join "\n" $lines }}
{{- end -}}

{{/*
Where the serving certificate comes from (certificate.source), checked once:
managed (the default), certManager or existingSecret. The values of the other
sources are refused rather than ignored, and the removed selfSigned is refused
with what to use instead. Nothing here generates anything: the same values
render the same output every time (GitOps).
*/}}
{{- define "clusterip-policy.certificateSource" -}}
{{- $c := .Values.certificate -}}
{{- $src := $c.source | default "managed" -}}
{{- $own := "certificate.source=existingSecret with certificate.existingSecret (a kubernetes.io/tls Secret you create: kubectl -n NAMESPACE create secret tls NAME --cert=tls.crt --key=tls.key) and certificate.caBundle (the PEM of its CA)" -}}
{{- if eq $src "selfSigned" -}}
{{- fail (printf "certificate.source: selfSigned was removed: it generated a new CA at every render, so each `helm template` (Argo CD, Flux) replaced the caBundle ahead of the pods and failed Service creates until the kubelet refreshed the Secret. Drop certificate.source: managed, the default, has the webhook make and renew its own CA and certificate, with nothing generated at render. To keep a certificate of your own: %s" $own) -}}
{{- end -}}
{{- with $c.selfSigned -}}
{{- if or .caCert .tlsCert .tlsKey -}}
{{- fail (printf "certificate.selfSigned.caCert, tlsCert and tlsKey were removed with the selfSigned source. To keep that certificate: %s; or drop them and let the webhook manage its own (certificate.source=managed, the default)" $own) -}}
{{- end -}}
{{- end -}}
{{- if not (has $src (list "managed" "certManager" "existingSecret")) -}}
{{- fail (printf "certificate.source: %q is not a certificate source; use managed (the default), certManager or existingSecret" $src) -}}
{{- end -}}
{{- if ne $src "existingSecret" -}}
{{- if or $c.existingSecret $c.caBundle -}}
{{- fail (printf "certificate.existingSecret and certificate.caBundle are for certificate.source=existingSecret, not %s; set the source, or drop them" $src) -}}
{{- end -}}
{{- else -}}
{{- if not $c.existingSecret -}}
{{- fail "certificate.source=existingSecret needs certificate.existingSecret: the name of a kubernetes.io/tls Secret in the release namespace holding tls.crt and tls.key for clusterip-policy-webhook.<namespace>.svc" -}}
{{- end -}}
{{- if eq $c.existingSecret "clusterip-policy-webhook-ca" -}}
{{- fail "certificate.existingSecret: clusterip-policy-webhook-ca is the managed source's CA Secret; give the Secret holding your serving certificate" -}}
{{- end -}}
{{- if not (contains "-----BEGIN CERTIFICATE-----" ($c.caBundle | default "")) -}}
{{- fail "certificate.source=existingSecret needs certificate.caBundle: the PEM CA certificate(s) that signed the Secret's tls.crt, which the apiservers trust (--set-file certificate.caBundle=ca.crt)" -}}
{{- end -}}
{{- if contains "PRIVATE KEY" $c.caBundle -}}
{{- fail "certificate.caBundle holds a private key; give only the CA certificate(s): the caBundle is readable by anyone who can read webhook configurations" -}}
{{- end -}}
{{- end -}}
{{- $issuer := dig "certManager" "issuerRef" dict $c -}}
{{- if $issuer -}}
{{- if ne $src "certManager" -}}
{{- fail (printf "certificate.certManager.issuerRef is for certificate.source=certManager, not %s; set the source, or drop it" $src) -}}
{{- end -}}
{{- if not (and $issuer.name (has ($issuer.kind | default "") (list "Issuer" "ClusterIssuer"))) -}}
{{- fail (printf "certificate.certManager.issuerRef %s needs a name and kind Issuer or ClusterIssuer (group defaults to cert-manager.io)" (toJson $issuer)) -}}
{{- end -}}
{{- end -}}
{{- $src -}}
{{- end -}}

{{/*
Where the pods take the policy from: crd (the ClusterIPPolicy object default,
the base's choice) or file (the ConfigMap, manifests/components/policy-file).
*/}}
{{- define "clusterip-policy.policySource" -}}
{{- $src := .Values.policySource | default "crd" -}}
{{- if not (has $src (list "crd" "file")) -}}
{{- fail (printf "policySource: %q is neither crd (the ClusterIPPolicy object) nor file (the ConfigMap)" $src) -}}
{{- end -}}
{{- $src -}}
{{- end -}}

{{/*
The policy value, the ClusterIPPolicy object manifest as `clusterip-policy
review --policy` reads it (apiVersion clusterip-policy.io/v1alpha1, named
default), as a dict: apiVersion, spec. Anything else is refused here with the
value named (the retired file format with how to convert it); the webhook's
loader checks the fields themselves.
*/}}
{{- define "clusterip-policy.policyParsed" -}}
{{- if not .Values.policy -}}
{{- include "clusterip-policy.policyFromValues" . -}}
{{- else -}}
{{- $p := .Values.policy | fromYaml -}}
{{- if hasKey $p "Error" -}}
{{- fail (printf "policy: not a YAML mapping (%s); give the ClusterIPPolicy object manifest, as `clusterip-policy review --policy` reads it" $p.Error) -}}
{{- end -}}
{{- $v := toString (get $p "apiVersion") -}}
{{- if eq $v "clusterip-policy.io/v1alpha1" -}}
{{- $name := toString (dig "metadata" "name" "" $p) -}}
{{- if ne $name "default" -}}
{{- fail (printf "policy: metadata.name %q: the webhook reads exactly one ClusterIPPolicy, named default" $name) -}}
{{- end -}}
{{- dict "apiVersion" $v "spec" (get $p "spec" | default dict) | toJson -}}
{{- else if eq $v "clusterip-policy/v1alpha1" -}}
{{- fail "policy: apiVersion clusterip-policy/v1alpha1 is the retired policy file format; give the ClusterIPPolicy object instead: apiVersion clusterip-policy.io/v1alpha1, kind ClusterIPPolicy, metadata.name default, and the file's other fields indented under spec:" -}}
{{- else -}}
{{- fail (printf "policy: apiVersion %q is not the ClusterIPPolicy object's clusterip-policy.io/v1alpha1" $v) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The policy written from the values dns and enforcement when policy is empty,
as policyParsed returns it: no serviceCIDRs (the cluster's ServiceCIDR
objects say where Services go), the DNS address reserved when dns.reserve,
and enforcement.default from enforcement.
*/}}
{{- define "clusterip-policy.policyFromValues" -}}
{{- $spec := dict "reserveKubernetesService" true "enforcement" (dict "default" .Values.enforcement) -}}
{{- if .Values.dns.reserve -}}
{{- $ip := include "clusterip-policy.dnsClusterIP" . | fromJson -}}
{{- $_ := set $spec "reservations" (list (dict "ip" $ip.ip "service" .Values.dns.service "note" (ternary "cluster DNS (address read from the cluster at install)" "cluster DNS" $ip.fromCluster))) -}}
{{- end -}}
{{- dict "apiVersion" "clusterip-policy.io/v1alpha1" "spec" $spec | toJson -}}
{{- end -}}

{{/*
The DNS address to reserve, as a dict: ip, fromCluster. dns.clusterIP when
given; else the ClusterIP of the Service dns.service, read from the cluster
(helm install and upgrade can; helm template cannot, and is told to give it).
Never a guess: an address nobody stated would be reserved for nothing.
*/}}
{{- define "clusterip-policy.dnsClusterIP" -}}
{{- $ip := toString .Values.dns.clusterIP -}}
{{- if $ip -}}
{{- if not (regexMatch "^([0-9]{1,3}\\.){3}[0-9]{1,3}$|^[0-9a-fA-F:]*:[0-9a-fA-F:.]*$" $ip) -}}
{{- fail (printf "dns.clusterIP: %q is not an IP address; give the ClusterIP of %s (kubectl -n %s get service %s -o jsonpath='{.spec.clusterIP}')" $ip .Values.dns.service (splitList "/" .Values.dns.service | first) (splitList "/" .Values.dns.service | last)) -}}
{{- end -}}
{{- dict "ip" $ip "fromCluster" false | toJson -}}
{{- else -}}
{{- $parts := splitList "/" (toString .Values.dns.service) -}}
{{- if ne (len $parts) 2 -}}
{{- fail (printf "dns.service: %q is not namespace/name, such as kube-system/kube-dns" .Values.dns.service) -}}
{{- end -}}
{{- $svc := lookup "v1" "Service" (index $parts 0) (index $parts 1) -}}
{{- $found := "" -}}
{{- if $svc -}}{{- $found = toString (dig "spec" "clusterIP" "" $svc) -}}{{- end -}}
{{- if or (not $found) (eq $found "None") -}}
{{- fail (printf "dns.clusterIP is required: the chart reserves the cluster DNS address for %s and will not guess it (10.96.0.10 is only kubeadm's default). Give it with --set dns.clusterIP=ADDRESS (kubectl -n %s get service %s -o jsonpath='{.spec.clusterIP}'), or --set dns.reserve=false to reserve none. helm template and --dry-run cannot read it from the cluster" .Values.dns.service (index $parts 0) (index $parts 1)) -}}
{{- end -}}
{{- dict "ip" $found "fromCluster" true | toJson -}}
{{- end -}}
{{- end -}}

{{/*
The policy for the ConfigMap: the same ClusterIPPolicy object manifest the
object source would apply, which the webhook's file loader reads.
*/}}
{{- define "clusterip-policy.policyFile" -}}
{{- $p := include "clusterip-policy.policyParsed" . | fromJson -}}
apiVersion: clusterip-policy.io/v1alpha1
kind: ClusterIPPolicy
metadata:
  name: default
spec:
{{- toYaml $p.spec | nindent 2 }}
{{- end -}}

{{/*
The image reference: [registry/]repository, then @digest when given, else
:tag. registry falls back to global.imageRegistry.
*/}}
{{- define "clusterip-policy.image" -}}
{{- $i := .Values.image -}}
{{- $reg := $i.registry | default (dig "imageRegistry" "" (.Values.global | default dict)) -}}
{{- $repo := ternary (printf "%s/%s" $reg $i.repository) $i.repository (ne $reg "") -}}
{{- if $i.digest -}}
{{- if not (regexMatch "^sha256:[a-f0-9]{64}$" $i.digest) -}}
{{- fail (printf "image.digest: %q is not a digest such as sha256:<64 hex digits>" $i.digest) -}}
{{- end -}}
{{- /* The tag stays beside the digest for people reading it; the digest decides. */ -}}
{{- if $i.tag -}}
{{- printf "%s:%s@%s" $repo (toString $i.tag) $i.digest -}}
{{- else -}}
{{- printf "%s@%s" $repo $i.digest -}}
{{- end -}}
{{- else -}}
{{- printf "%s:%s" $repo (toString $i.tag) -}}
{{- end -}}
{{- end -}}

{{/*
Refuses pod and container security settings that would take the webhook out
of the restricted Pod Security profile the base keeps: it guards every
Service create and needs no privilege.
*/}}
{{- define "clusterip-policy.checkSecurity" -}}
{{- $pod := .Values.podSecurityContext | default dict -}}
{{- $c := .Values.securityContext | default dict -}}
{{- if or (eq (toString (dig "runAsNonRoot" true $pod)) "false") (eq (toString (dig "runAsNonRoot" true $c)) "false") -}}
{{- fail "podSecurityContext/securityContext: runAsNonRoot false would let the webhook run as root; it needs no privilege (keep the restricted profile)" -}}
{{- end -}}
{{- if or (eq (toString (dig "runAsUser" 1 $pod)) "0") (eq (toString (dig "runAsUser" 1 $c)) "0") -}}
{{- fail "podSecurityContext/securityContext: runAsUser 0 is root; the image runs as 65532" -}}
{{- end -}}
{{- if eq (toString (dig "privileged" false $c)) "true" -}}
{{- fail "securityContext.privileged: true; the webhook needs no privilege" -}}
{{- end -}}
{{- if eq (toString (dig "allowPrivilegeEscalation" false $c)) "true" -}}
{{- fail "securityContext.allowPrivilegeEscalation: true; the restricted profile forbids it and the webhook needs none" -}}
{{- end -}}
{{- end -}}

{{/*
hostNetwork in a namespace whose Pod Security forbids it: baseline and
restricted refuse host networking (and the host ports it brings), so the
ReplicaSet would create no pod and helm --wait would only time out. The
namespace's enforce label is read where lookup reads the cluster (helm
install, upgrade, --dry-run=server); helm template cannot, and checks
nothing. A namespace without the label is privileged unless the cluster's
PodSecurity admission configuration sets another default, which no render
can read.
*/}}
{{- define "clusterip-policy.checkNamespacePodSecurity" -}}
{{- if eq (toString .Values.hostNetwork) "true" -}}
{{- $ns := lookup "v1" "Namespace" "" .Release.Namespace | default dict -}}
{{- $level := toString (dig "metadata" "labels" "pod-security.kubernetes.io/enforce" "" $ns) -}}
{{- if has $level (list "baseline" "restricted") -}}
{{- fail (printf "hostNetwork: true, but namespace %s enforces Pod Security %s (label pod-security.kubernetes.io/enforce=%s), which forbids host networking: the ReplicaSet would create no pod. Either label the namespace privileged (kubectl label namespace %s pod-security.kubernetes.io/enforce=privileged --overwrite), or drop hostNetwork where the control plane can reach the pods' addresses on ports.webhook (the AWS VPC CNI; docs/providers/eks.md)" .Release.Namespace $level $level .Release.Namespace) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
criticalPodsQuota: the ResourceQuota that admits the chart's pods of a
critical priority class, or nothing. A ResourceQuota admission
configuration with limitedResources (GKE's) refuses a pod of
system-cluster-critical or system-node-critical in a namespace without a
quota whose scopeSelector covers that class. Called with root (the chart's
context) and hook: true renders the pre-upgrade hook's copy, which exists
while the CRD upgrade's Job starts, also on an upgrade from a release that
had no quota (its pre-upgrade hooks run before the release's objects).
*/}}
{{- define "clusterip-policy.criticalPodsQuota" -}}
{{- $root := .root -}}
{{- $v := $root.Values -}}
{{- $q := $v.criticalPodsQuota | default dict -}}
{{- $class := toString $v.priorityClassName -}}
{{- /* absent: a release upgraded with --reuse-values from a chart without it */ -}}
{{- if and (ne (toString (dig "enabled" true $q)) "false") (has $class (list "system-cluster-critical" "system-node-critical")) -}}
{{- $pods := int (dig "pods" 0 $q) -}}
{{- $least := add (int $v.replicas) 2 -}}
{{- if eq $pods 0 -}}
{{- $pods = add (mul (int $v.replicas) 2) 4 -}}
{{- else if lt $pods $least -}}
{{- fail (printf "criticalPodsQuota.pods: %d is fewer than replicas + 2 (%d): a rolling update's surge pod or a hook Job's pod would be refused by the quota. Raise it, or give 0 for 2 × replicas + 4" $pods $least) -}}
{{- end -}}
{{- if eq (toString .hook) "true" -}}
{{- /* The hook's Job starts beside the release's running pods, which may be
more than this upgrade's replicas (an upgrade that lowers them): room for
those too. */ -}}
{{- $live := lookup "apps/v1" "Deployment" $root.Release.Namespace "clusterip-policy-webhook" | default dict -}}
{{- $pods = add $pods (int (dig "spec" "replicas" 0 $live)) -}}
{{- end -}}
apiVersion: v1
kind: ResourceQuota
metadata:
  name: {{ ternary "clusterip-policy-critical-pods-hook" "clusterip-policy-critical-pods" (eq (toString .hook) "true") }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "clusterip-policy.labels" $root | nindent 4 }}
  {{- if eq (toString .hook) "true" }}
  annotations:
    helm.sh/hook: pre-upgrade
    helm.sh/hook-weight: "-2"
    helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
  {{- end }}
spec:
  hard:
    pods: {{ $pods | quote }}
  scopeSelector:
    matchExpressions:
    - scopeName: PriorityClass
      operator: In
      values: [{{ $class | quote }}]
{{- end -}}
{{- end -}}

{{/*
webhook.shutdownDelaySeconds, 0-120: --shutdown-delay. The pod's
terminationGracePeriodSeconds is this delay, then the longest review
(timeoutSeconds), then 10 s for the process to finish, so SIGKILL never
cuts a review short.
*/}}
{{- define "clusterip-policy.shutdownDelaySeconds" -}}
{{- range .Values.extraArgs -}}
{{- if or (eq . "--shutdown-delay") (hasPrefix "--shutdown-delay=" .) -}}
{{- fail (printf "extraArgs: %q would override the --shutdown-delay the chart sets with the pods' terminationGracePeriodSeconds; set webhook.shutdownDelaySeconds instead" .) -}}
{{- end -}}
{{- end -}}
{{- $v := .Values.webhook.shutdownDelaySeconds -}}
{{- if eq (kindOf $v) "invalid" -}}{{- $v = 15 -}}{{- end -}}
{{- if not (or (kindIs "int" $v) (kindIs "int64" $v) (and (kindIs "float64" $v) (eq (floor $v) $v))) -}}
{{- fail (printf "webhook.shutdownDelaySeconds: %v is not a whole number of seconds; give one in 0-120, for example 15" $v) -}}
{{- end -}}
{{- $d := int $v -}}
{{- if or (lt $d 0) (gt $d 120) -}}
{{- fail (printf "webhook.shutdownDelaySeconds: %v is outside 0-120; 15 covers the endpoint propagation measured under load (RELIABILITY.md)" $v) -}}
{{- end -}}
{{- $d -}}
{{- end -}}

{{- define "clusterip-policy.terminationGracePeriodSeconds" -}}
{{- add (int (include "clusterip-policy.shutdownDelaySeconds" .)) (int (include "clusterip-policy.timeoutSeconds" .)) 10 -}}
{{- end -}}

{{/* webhook.timeoutSeconds, 1-10 (the apiserver's own bounds for v1). */}}
{{- define "clusterip-policy.timeoutSeconds" -}}
{{- $t := int (.Values.webhook.timeoutSeconds | default 5) -}}
{{- if or (lt $t 1) (gt $t 10) -}}
{{- fail (printf "webhook.timeoutSeconds: %v is outside 1-10, the apiserver's bounds; the base uses 5" .Values.webhook.timeoutSeconds) -}}
{{- end -}}
{{- $t -}}
{{- end -}}

{{- /*
"true" when the leader arms the Service webhooks (webhook.armFailurePolicy,
--arm-failure-policy), "" when it does not. Refuses the combinations that
cannot work, naming the fix.
*/ -}}
{{- define "clusterip-policy.armFailurePolicy" -}}
{{- if .Values.webhook.armFailurePolicy -}}
{{- if ne .Values.webhook.failurePolicy "Fail" -}}
{{- fail (printf "webhook.armFailurePolicy: the leader arms the Service webhooks to failurePolicy Fail once the apiserver reaches a ready replica, but webhook.failurePolicy is %q; set webhook.armFailurePolicy=false to keep them at Ignore" .Values.webhook.failurePolicy) -}}
{{- end -}}
{{- if has (toString .Values.webhook.auditInterval) (list "0" "0s" "0m" "0h") -}}
{{- fail "webhook.armFailurePolicy needs webhook.auditInterval: while the Service webhooks are not armed (failurePolicy Ignore) a create the apiservers cannot send to the webhook is admitted unchecked, and the periodic audit is what names it; set webhook.auditInterval (5m), or webhook.armFailurePolicy=false to register them with Fail" -}}
{{- end -}}
true
{{- end -}}
{{- end -}}

{{- /*
The failurePolicy to render for one Service webhook the leader arms: the
live configuration's when it exists and says Fail (helm upgrade then keeps
what the leader armed), else Ignore (a first install; helm template, where
lookup finds nothing). Called with (dict "kind" ... "webhook" ...).
*/ -}}
{{- define "clusterip-policy.liveFailurePolicy" -}}
{{- $policy := "Ignore" -}}
{{- $live := lookup "admissionregistration.k8s.io/v1" .kind "" "clusterip-policy" -}}
{{- range (($live | default dict).webhooks | default list) -}}
{{- if and (eq .name $.webhook) (eq (.failurePolicy | default "") "Fail") -}}
{{- $policy = "Fail" -}}
{{- end -}}
{{- end -}}
{{- $policy -}}
{{- end -}}

{{- /*
certificate.source=managed: the caBundle line of one live webhook (called
with (dict "kind" ... "webhook" ...)), "" when lookup finds none (a first
install; helm template). The leader writes the caBundle and the chart
renders none of its own, but it must not drop one: when the release's last
manifest held a caBundle (the previous chart's generated CA, an
existingSecret), Helm's three-way merge deletes a field the new manifest
omits, and every webhook call would then fail TLS until the new leader
writes it again. Rendering the live value keeps it; it is the value in
place, so the write changes nothing.
*/ -}}
{{- define "clusterip-policy.liveCABundle" -}}
{{- $live := lookup "admissionregistration.k8s.io/v1" .kind "" "clusterip-policy" -}}
{{- range (($live | default dict).webhooks | default list) -}}
{{- if and (eq .name $.webhook) (dig "clientConfig" "caBundle" "" .) -}}
{{- printf "\n    caBundle: %s" .clientConfig.caBundle -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- /*
certificate.source=managed: the serving Secret the previous chart rendered
(a Helm-generated certificate, before the webhook managed its own), as it
is in the cluster, when lookup finds one this release made and the leader
has not taken over (its label app.kubernetes.io/managed-by is still Helm's).
Rendered again, with helm.sh/resource-policy: keep, so that helm upgrade
does not delete it: the new pods serve it until their leader has made a CA
of its own and moved the certificate to it (and relabels the Secret), and
the old pods keep serving it meanwhile. "" otherwise: the leader creates
the Secret, outside the release.
*/ -}}
{{- define "clusterip-policy.inheritedServingSecret" -}}
{{- $live := lookup "v1" "Secret" .Release.Namespace "clusterip-policy-webhook-tls" -}}
{{- if $live -}}
{{- $owner := dig "metadata" "annotations" "meta.helm.sh/release-name" "" $live -}}
{{- $by := dig "metadata" "labels" "app.kubernetes.io/managed-by" "" $live -}}
{{- if and (eq $owner .Release.Name) (ne $by "clusterip-policy") (index ($live.data | default dict) "tls.crt") (index ($live.data | default dict) "tls.key") -}}
{{- toJson $live -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The Service webhooks' namespaceSelector, as JSON: one NotIn on
kubernetes.io/metadata.name of the release namespace and
webhook.excludedNamespaces, then webhook.namespaceSelector's matchLabels and
matchExpressions (every requirement must hold). kube-system and default must
stay selected: refused by name, and by label as far as the render knows
their labels (their name label always; with helm install and upgrade the
labels lookup reads; helm template has no lookup). The leader reads the
stored selector back (internal/judged) and logs when either is left out by
a label added later. docs/design.md, "Which namespaces are judged here".
*/}}
{{- define "clusterip-policy.namespaceSelector" -}}
{{- if has .Release.Namespace (list "default" "kube-system") -}}
{{- fail (printf "release namespace %q: the webhook's own namespace is excluded from its webhooks, and %s must stay covered; install into a namespace of its own: -n clusterip-policy --create-namespace" .Release.Namespace .Release.Namespace) -}}
{{- end -}}
{{- $excluded := prepend (.Values.webhook.excludedNamespaces | default list) .Release.Namespace | uniq -}}
{{- if has "kube-system" $excluded -}}
{{- fail "webhook.excludedNamespaces: kube-system is where kube-dns lives, whose address the policy guards most; leave it covered" -}}
{{- end -}}
{{- if has "default" $excluded -}}
{{- fail "webhook.excludedNamespaces: default must stay covered (the manifests' safety checks require it; default/kubernetes is already exempt for the apiserver's own writes); use the policy's exemptions.namespaces to relax enforcement there instead" -}}
{{- end -}}
{{- $user := .Values.webhook.namespaceSelector | default dict -}}
{{- $exprs := list (dict "key" "kubernetes.io/metadata.name" "operator" "NotIn" "values" $excluded) -}}
{{- range $i, $e := ($user.matchExpressions | default list) -}}
{{- $vals := $e.values | default list -}}
{{- if and (has $e.operator (list "In" "NotIn")) (not $vals) -}}
{{- fail (printf "webhook.namespaceSelector.matchExpressions[%d]: operator %s on key %q needs values; the apiserver refuses it without" $i $e.operator $e.key) -}}
{{- end -}}
{{- if and (has $e.operator (list "Exists" "DoesNotExist")) $vals -}}
{{- fail (printf "webhook.namespaceSelector.matchExpressions[%d]: operator %s on key %q takes no values; drop them, or use In or NotIn" $i $e.operator $e.key) -}}
{{- end -}}
{{- $exprs = append $exprs $e -}}
{{- end -}}
{{- $sel := dict "matchExpressions" $exprs -}}
{{- with $user.matchLabels -}}{{- $_ := set $sel "matchLabels" . -}}{{- end -}}
{{- range $ns := list "kube-system" "default" -}}
{{- $labels := dict "kubernetes.io/metadata.name" $ns -}}
{{- $live := lookup "v1" "Namespace" "" $ns -}}
{{- if $live -}}{{- $labels = merge (dig "metadata" "labels" dict $live) $labels -}}{{- end -}}
{{- if not (include "clusterip-policy.selectorMatches" (dict "selector" $user "labels" $labels)) -}}
{{- fail (printf "webhook.namespaceSelector: does not select namespace %s (labels %s%s), which must stay covered (kube-dns and the kubernetes Service live in kube-system and default); exclude by a label those namespaces do not carry, such as {key: clusterip-policy.io/excluded, operator: DoesNotExist}" $ns (toJson $labels) (ternary "" ", its name label only: helm template cannot read the cluster" (not (empty $live)))) -}}
{{- end -}}
{{- end -}}
{{- toJson $sel -}}
{{- end -}}

{{/*
"true" when the label selector (matchLabels, matchExpressions) matches the
labels, as the apiserver matches a namespaceSelector; "" otherwise.
*/}}
{{- define "clusterip-policy.selectorMatches" -}}
{{- $l := .labels -}}
{{- $ok := true -}}
{{- range $k, $v := (.selector.matchLabels | default dict) -}}
{{- if not (and (hasKey $l $k) (eq (toString (get $l $k)) (toString $v))) -}}{{- $ok = false -}}{{- end -}}
{{- end -}}
{{- range (.selector.matchExpressions | default list) -}}
{{- $has := hasKey $l .key -}}
{{- $val := "" -}}{{- if $has -}}{{- $val = toString (get $l .key) -}}{{- end -}}
{{- $vals := list -}}{{- range (.values | default list) -}}{{- $vals = append $vals (toString .) -}}{{- end -}}
{{- if eq .operator "In" -}}{{- if not (and $has (has $val $vals)) -}}{{- $ok = false -}}{{- end -}}
{{- else if eq .operator "NotIn" -}}{{- if and $has (has $val $vals) -}}{{- $ok = false -}}{{- end -}}
{{- else if eq .operator "Exists" -}}{{- if not $has -}}{{- $ok = false -}}{{- end -}}
{{- else if eq .operator "DoesNotExist" -}}{{- if $has -}}{{- $ok = false -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- if $ok -}}true{{- end -}}
{{- end -}}

{{/*
The three ports as a dict (webhook, health, metrics), checked: whole numbers
in 1-65535, all different, and with hostNetwork none of the node's own
(the kubelet: 10248 healthz, 10250 API, 10255 read-only; kube-proxy: 10249
metrics, 10256 healthz) nor below 1024 (the container drops every capability,
NET_BIND_SERVICE too). extraArgs may not set them behind the chart's back.
*/}}
{{- define "clusterip-policy.ports" -}}
{{- range $arg := .Values.extraArgs -}}
{{- range $flag, $value := dict "--port" "ports.webhook" "--health-probe-bind-address" "ports.health" "--metrics-bind-address" "ports.metrics" -}}
{{- if or (eq $arg $flag) (hasPrefix (printf "%s=" $flag) $arg) -}}
{{- fail (printf "extraArgs: %q would override the %s the chart sets with the containerPorts and the Service; set %s instead" $arg $flag $value) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $p := .Values.ports | default dict -}}
{{- $out := dict -}}
{{- range $name, $def := dict "webhook" 9443 "health" 8081 "metrics" 8080 -}}
{{- /* absent: a release upgraded with --reuse-values from a chart without ports */ -}}
{{- $v := $def -}}
{{- if hasKey $p $name -}}{{- $v = get $p $name -}}{{- end -}}
{{- if eq (kindOf $v) "invalid" -}}{{- $v = $def -}}{{- end -}}
{{- if not (or (kindIs "int" $v) (kindIs "int64" $v) (and (kindIs "float64" $v) (eq (floor $v) $v))) -}}
{{- fail (printf "ports.%s: %v is not a port number; give one in 1-65535" $name $v) -}}
{{- end -}}
{{- if or (lt (int $v) 1) (gt (int $v) 65535) -}}
{{- fail (printf "ports.%s: %v is outside 1-65535" $name $v) -}}
{{- end -}}
{{- $_ := set $out $name (int $v) -}}
{{- end -}}
{{- if eq $out.webhook $out.health -}}
{{- fail (printf "ports.health: %d is ports.webhook's too; give each of ports.webhook, ports.health and ports.metrics its own port" $out.health) -}}
{{- end -}}
{{- if eq $out.webhook $out.metrics -}}
{{- fail (printf "ports.metrics: %d is ports.webhook's too; give each of ports.webhook, ports.health and ports.metrics its own port" $out.metrics) -}}
{{- end -}}
{{- if eq $out.health $out.metrics -}}
{{- fail (printf "ports.metrics: %d is ports.health's too; give each of ports.webhook, ports.health and ports.metrics its own port" $out.metrics) -}}
{{- end -}}
{{- if .Values.hostNetwork -}}
{{- $node := dict "10248" "the kubelet's healthz port" "10250" "the kubelet's port" "10255" "the kubelet's read-only port" "10249" "kube-proxy's metrics port" "10256" "kube-proxy's healthz port" -}}
{{- range $name := list "webhook" "health" "metrics" -}}
{{- $v := get $out $name -}}
{{- with get $node (toString $v) -}}
{{- fail (printf "ports.%s: %d is %s on every node; with hostNetwork the pods would share the node's ports and could never bind it. Choose a port free on the nodes (for example 9443, 8081, 8080 by default), or drop hostNetwork: GKE private clusters can use ports.webhook=10250 without it (docs/providers/gke.md)" $name $v .) -}}
{{- end -}}
{{- if lt $v 1024 -}}
{{- fail (printf "ports.%s: %d is below 1024; with hostNetwork the pods bind the node's ports, and the webhook runs as a non-root user without NET_BIND_SERVICE. Choose a port of 1024 or more and open it to the control plane" $name $v) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and (not .Values.hostNetwork) (eq (toString .Values.dnsPolicy) "ClusterFirstWithHostNet") -}}
{{- fail "dnsPolicy: ClusterFirstWithHostNet is for hostNetwork pods; leave dnsPolicy empty, or set hostNetwork: true" -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}


{{/* Labels every object carries, as the base's kustomization adds them. */}}
{{- define "clusterip-policy.labels" -}}
app.kubernetes.io/name: clusterip-policy-webhook
app.kubernetes.io/part-of: clusterip-policy
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/*
The self-signed TLS material as a dict (caCert, tlsCert, tlsKey), computed once
per render: the values when all three are given, else the Secret already in the
cluster (so an upgrade keeps the certificate the pods serve and the caBundle
that trusts it), else new ones from genCA/genSignedCert for the names an
apiserver may use for the webhook Service (certs.ServiceDNSNames).
*/}}
{{- define "clusterip-policy.tls" -}}
{{- $s := .Values.certificate.selfSigned -}}
{{- if and $s.caCert $s.tlsCert $s.tlsKey -}}
{{- dict "caCert" $s.caCert "tlsCert" $s.tlsCert "tlsKey" $s.tlsKey | toJson -}}
{{- else if or $s.caCert $s.tlsCert $s.tlsKey -}}
{{- fail "certificate.selfSigned: give all three of caCert, tlsCert and tlsKey, or none to have helm generate them" -}}
{{- else -}}
{{- $old := lookup "v1" "Secret" .Release.Namespace "clusterip-policy-webhook-tls" -}}
{{- if and $old (index $old.data "ca.crt") -}}
{{- dict "caCert" (index $old.data "ca.crt" | b64dec) "tlsCert" (index $old.data "tls.crt" | b64dec) "tlsKey" (index $old.data "tls.key" | b64dec) | toJson -}}
{{- else -}}
{{- $svc := "clusterip-policy-webhook" -}}
{{- $ns := .Release.Namespace -}}
{{- $names := list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) -}}
{{- $ca := genCA "clusterip-policy-ca" (int $s.days) -}}
{{- $cert := genSignedCert (printf "%s.%s.svc" $svc $ns) nil $names (int $s.days) $ca -}}
{{- dict "caCert" $ca.Cert "tlsCert" $cert.Cert "tlsKey" $cert.Key | toJson -}}
{{- end -}}
{{- end -}}
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
The policy value, in either format `clusterip-policy review --policy` reads (the
object manifest, apiVersion clusterip-policy.io/v1alpha1, or the file,
apiVersion clusterip-policy/v1alpha1), as a dict: apiVersion (which of the
two), spec (the fields). Anything else is refused here with the value named;
the webhook's loader checks the fields themselves.
*/}}
{{- define "clusterip-policy.policyParsed" -}}
{{- $p := .Values.policy | fromYaml -}}
{{- if hasKey $p "Error" -}}
{{- fail (printf "policy: not a YAML mapping (%s); give the ClusterIPPolicy object or the policy file, as `clusterip-policy review --policy` reads it" $p.Error) -}}
{{- end -}}
{{- $v := toString (get $p "apiVersion") -}}
{{- if eq $v "clusterip-policy.io/v1alpha1" -}}
{{- $name := toString (dig "metadata" "name" "" $p) -}}
{{- if ne $name "default" -}}
{{- fail (printf "policy: metadata.name %q: the webhook reads exactly one ClusterIPPolicy, named default" $name) -}}
{{- end -}}
{{- dict "apiVersion" $v "spec" (get $p "spec" | default dict) | toJson -}}
{{- else if eq $v "clusterip-policy/v1alpha1" -}}
{{- dict "apiVersion" $v "spec" (omit $p "apiVersion" "kind") | toJson -}}
{{- else -}}
{{- fail (printf "policy: apiVersion %q is neither the ClusterIPPolicy object's clusterip-policy.io/v1alpha1 nor the policy file's clusterip-policy/v1alpha1" $v) -}}
{{- end -}}
{{- end -}}

{{/*
The policy as a file, for the ConfigMap: a file value verbatim (comments
kept), an object's spec under the file's apiVersion and kind.
*/}}
{{- define "clusterip-policy.policyFile" -}}
{{- $p := include "clusterip-policy.policyParsed" . | fromJson -}}
{{- if eq $p.apiVersion "clusterip-policy/v1alpha1" -}}
{{- .Values.policy -}}
{{- else -}}
apiVersion: clusterip-policy/v1alpha1
kind: ClusterIPPolicy
{{ toYaml $p.spec }}
{{- end -}}
{{- end -}}

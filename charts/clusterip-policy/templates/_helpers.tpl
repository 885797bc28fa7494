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

{{- /*
The PrometheusRule's groups: files/alerts.yaml (a copy of
manifests/monitoring/alerts.yaml) as monitoring.prometheusRule.* tunes it.
With the default values the groups are the file's exactly
(TestChartMonitoringToggles), so the kustomize and chart alerts agree. The
shape follows kube-prometheus-stack's: disabled.<Alert> (its
defaultRules.disabled), customRules.<Alert> {for, severity, labels} (its
customRules), additionalRuleLabels (its defaultRules.additionalRuleLabels);
extraRules are the user's own rules, appended to the group clusterip-policy.
*/ -}}
{{- define "clusterip-policy.prometheusRuleGroups" -}}
{{- $pr := .Values.monitoring.prometheusRule -}}
{{- $file := .Files.Get "files/alerts.yaml" | fromYaml -}}
{{- $names := list -}}
{{- range $file.groups }}{{ range .rules }}{{ $names = append $names .alert }}{{ end }}{{ end -}}
{{- /* Alerts renamed, old name to new: values written for the old name
(disabled, customRules) still tune the renamed alert, so an upgrade with
them neither fails nor loses the tuning; the new name's entry wins when
both are given. ClusterIPPolicyHoldsNoLeader (development builds before
v0.1.0): remove in v0.2.0. */ -}}
{{- $renamed := dict "ClusterIPPolicyHoldsNoLeader" "ClusterIPPolicyNoLeader" -}}
{{- /* A misspelt name would leave the alert on (or untuned) silently. */ -}}
{{- range $field := list "disabled" "customRules" -}}
{{- range $name, $_ := (get $pr $field | default dict) -}}
{{- if not (or (has $name $names) (hasKey $renamed $name)) -}}
{{- fail (printf "monitoring.prometheusRule.%s.%s: no such alert; the chart's alerts are %s" $field $name (join ", " $names)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* Checked here rather than in the schema: helm's schema errors name a wrong
place for a bad property name. */ -}}
{{- $labelSets := dict "additionalRuleLabels" ($pr.additionalRuleLabels | default dict) -}}
{{- range $name, $o := ($pr.customRules | default dict) -}}
{{- $_ := set $labelSets (printf "customRules.%s.labels" $name) ($o.labels | default dict) -}}
{{- end -}}
{{- range $where, $set := $labelSets -}}
{{- range $label, $_ := $set -}}
{{- if not (regexMatch "^[a-zA-Z_][a-zA-Z0-9_]*$" $label) -}}
{{- fail (printf "monitoring.prometheusRule.%s: %q is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)" $where $label) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* The capacity alerts' two sides: the free addresses, and the room they
are a share of (free plus allocated for a dynamic band: the held addresses
and reserved ranges are never the allocator's; a reserved range's size). */ -}}
{{- $bandFree := `max without (instance, pod, state) (clusterip_policy_band_addresses{band="dynamic", state="free"})` -}}
{{- $bandRoom := `sum without (instance, pod, state) (max without (instance, pod) (clusterip_policy_band_addresses{band="dynamic", state=~"free|allocated"}))` -}}
{{- $rangeFree := `max without (instance, pod, state) (clusterip_policy_reserved_range_addresses{state="free"})` -}}
{{- $rangeRoom := `sum without (instance, pod, state) (max without (instance, pod) (clusterip_policy_reserved_range_addresses))` -}}
{{- $c := $pr.capacity -}}
{{- $bandOf := "of what the allocator may use there" -}}
{{- $rangeOf := "of its size" -}}
{{- $capacity := dict
  "ClusterIPPolicyDynamicBandFilling" (dict "level" $c.dynamicBand.warning "key" "capacity.dynamicBand.warning" "free" $bandFree "room" $bandRoom "of" $bandOf)
  "ClusterIPPolicyDynamicBandFull" (dict "level" $c.dynamicBand.critical "key" "capacity.dynamicBand.critical" "free" $bandFree "room" $bandRoom "of" $bandOf)
  "ClusterIPPolicyReservedRangeFilling" (dict "level" $c.reservedRange.warning "key" "capacity.reservedRange.warning" "free" $rangeFree "room" $rangeRoom "of" $rangeOf)
  "ClusterIPPolicyReservedRangeFull" (dict "level" $c.reservedRange.critical "key" "capacity.reservedRange.critical" "free" $rangeFree "room" $rangeRoom "of" $rangeOf) -}}
{{- range $kind := list "dynamicBand" "reservedRange" -}}
{{- $w := get $c $kind | dig "warning" "usedPercent" nil -}}
{{- $cr := get $c $kind | dig "critical" "usedPercent" nil -}}
{{- if and (not (kindIs "invalid" $w)) (not (kindIs "invalid" $cr)) (ge (float64 $w) (float64 $cr)) -}}
{{- fail (printf "monitoring.prometheusRule.capacity.%s: warning.usedPercent %v is not below critical.usedPercent %v, so the critical alert would fire first; lower the warning or raise the critical level" $kind $w $cr) -}}
{{- end -}}
{{- $w = get $c $kind | dig "warning" "freeAddresses" nil -}}
{{- $cr = get $c $kind | dig "critical" "freeAddresses" nil -}}
{{- if and (not (kindIs "invalid" $w)) (not (kindIs "invalid" $cr)) (le (int64 $w) (int64 $cr)) -}}
{{- fail (printf "monitoring.prometheusRule.capacity.%s: warning.freeAddresses %v is not above critical.freeAddresses %v, so the critical alert would fire first; raise the warning or lower the critical level" $kind $w $cr) -}}
{{- end -}}
{{- end -}}
{{- $disabled := deepCopy ($pr.disabled | default dict) -}}
{{- $custom := deepCopy ($pr.customRules | default dict) -}}
{{- range $old, $new := $renamed -}}
{{- range $set := list $disabled $custom -}}
{{- if and (hasKey $set $old) (not (hasKey $set $new)) -}}
{{- $_ := set $set $new (get $set $old) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $groups := list -}}
{{- range $file.groups -}}
{{- $rules := list -}}
{{- range .rules -}}
{{- if not (get $disabled .alert) -}}
{{- $r := deepCopy . -}}
{{- with get $capacity .alert -}}
{{- $_ := set $r "expr" (include "clusterip-policy.capacityExpr" .) -}}
{{- $desc := $r.annotations.description -}}
{{- if not (regexMatch `\(the alert fires at [^)]*\)` $desc) -}}
{{- fail (printf "files/alerts.yaml: the description of %s lost its \"(the alert fires at ...)\" that the chart rewrites for monitoring.prometheusRule.%s" $r.alert .key) -}}
{{- end -}}
{{- $_ := set $r.annotations "description" (regexReplaceAll `\(the alert fires at [^)]*\)` $desc (include "clusterip-policy.capacityPhrase" .)) -}}
{{- end -}}
{{- $labels := mergeOverwrite (dict) ($r.labels | default dict) ($pr.additionalRuleLabels | default dict) -}}
{{- $o := get $custom .alert | default dict -}}
{{- $labels = mergeOverwrite $labels ($o.labels | default dict) -}}
{{- with $o.severity }}{{ $_ := set $labels "severity" . }}{{ end -}}
{{- with $o.for }}{{ $_ := set $r "for" . }}{{ end -}}
{{- $_ := set $r "labels" $labels -}}
{{- $rules = append $rules $r -}}
{{- end -}}
{{- end -}}
{{- if eq .name "clusterip-policy" -}}
{{- $rules = concat $rules ($pr.extraRules | default list) -}}
{{- end -}}
{{- /* A group all of whose alerts are disabled is left out: Prometheus would
evaluate an empty group for nothing. */ -}}
{{- if $rules -}}
{{- $g := deepCopy . -}}
{{- $_ := set $g "rules" $rules -}}
{{- $groups = append $groups $g -}}
{{- end -}}
{{- end -}}
{{- toYaml (dict "groups" $groups) -}}
{{- end -}}

{{- /* A capacity level as PromQL: free <= share * room when usedPercent is set,
free <= N when freeAddresses is, either (or) when both are. The share is
rounded to 4 places so the number stays a plain decimal PromQL reads. */ -}}
{{- define "clusterip-policy.capacityExpr" -}}
{{- $p := dig "usedPercent" nil .level -}}
{{- $n := dig "freeAddresses" nil .level -}}
{{- $parts := list -}}
{{- if not (kindIs "invalid" $p) -}}
{{- $parts = append $parts (printf "%s <= %v * %s" .free (round (divf (subf 100 $p) 100) 4) .room) -}}
{{- end -}}
{{- if not (kindIs "invalid" $n) -}}
{{- $parts = append $parts (printf "%s <= %d" .free (int64 $n)) -}}
{{- end -}}
{{- if not $parts -}}
{{- fail (printf "monitoring.prometheusRule.%s: neither usedPercent nor freeAddresses is set, so the alert has no level; set one, or turn the alert off in monitoring.prometheusRule.disabled" .key) -}}
{{- end -}}
{{- if eq (len $parts) 1 -}}
{{- first $parts -}}
{{- else -}}
{{- printf "(%s) or (%s)" (index $parts 0) (index $parts 1) -}}
{{- end -}}
{{- end -}}

{{- /* The level in the alert's description, in the words of files/alerts.yaml:
"(the alert fires at 80% used, 20% or less free, of its size)". */ -}}
{{- define "clusterip-policy.capacityPhrase" -}}
{{- $p := dig "usedPercent" nil .level -}}
{{- $n := dig "freeAddresses" nil .level -}}
{{- $parts := list -}}
{{- if not (kindIs "invalid" $p) -}}
{{- $parts = append $parts (printf "%v%% used, %v%% or less free, %s" $p (round (subf 100 $p) 2) .of) -}}
{{- end -}}
{{- if not (kindIs "invalid" $n) -}}
{{- $parts = append $parts (printf "%d or fewer free addresses" (int64 $n)) -}}
{{- end -}}
{{- printf "(the alert fires at %s)" (join ", or at " $parts) -}}
{{- end -}}

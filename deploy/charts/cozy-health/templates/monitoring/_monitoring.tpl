{{/*
The monitoring stack to attach to: "victoriametrics", "prometheus-operator"
or "" (none). monitoring.stack "auto" asks the cluster which API it serves
(.Capabilities.APIVersions: helm install reads it from the apiserver; helm
template takes --api-versions), VictoriaMetrics first as Cozystack runs it.
*/}}
{{- define "cozy-health.monitoringStack" -}}
{{- $s := .Values.monitoring.stack -}}
{{- if eq $s "auto" -}}
{{- if .Capabilities.APIVersions.Has "operator.victoriametrics.com/v1beta1" -}}victoriametrics
{{- else if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" -}}prometheus-operator
{{- end -}}
{{- else if ne $s "none" -}}{{ $s }}
{{- end -}}
{{- end }}

{{/* Labels of the monitoring objects: the chart's and monitoring.labels. */}}
{{- define "cozy-health.monitoringLabels" -}}
{{ include "cozy-health.labels" . }}
{{- with .Values.monitoring.labels }}
{{ toYaml . }}
{{- end }}
{{- end }}

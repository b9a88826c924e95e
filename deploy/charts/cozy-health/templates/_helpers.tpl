{{/*
Names are fixed, not prefixed with the release name: cozy-health is installed
once per cluster (its CRD and ClusterRoles are cluster-wide), and the names
are part of its interface (the agent's ServiceAccount that the aggregator
trusts, the Talos Secret, the TLS Secret, kubectl health's defaults).
*/}}
{{- define "cozy-health.agent" -}}cozy-health-agent{{- end }}
{{- define "cozy-health.aggregator" -}}cozy-health-aggregator{{- end }}

{{/* Labels every object carries. */}}
{{- define "cozy-health.labels" -}}
app.kubernetes.io/part-of: cozy-health
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* Selector labels of one workload: (dict "name" NAME). */}}
{{- define "cozy-health.selector" -}}
app.kubernetes.io/name: {{ .name }}
{{- end }}

{{/*
An image reference: (dict "root" $ "image" .Values.agent.image), the value
as it is: REGISTRY/NAME:TAG@DIGEST as `make push` writes it (the digest is
what the runtime pulls; the tag stays for people).
*/}}
{{- define "cozy-health.image" -}}
{{- .image -}}
{{- end }}

{{/* The agents' ServiceAccount as the aggregator names it: namespace/name. */}}
{{- define "cozy-health.agentServiceAccount" -}}
{{ .Release.Namespace }}/{{ include "cozy-health.agent" . }}
{{- end }}

{{/* The agent DaemonSet's nodeSelector as a label selector string. */}}
{{- define "cozy-health.nodeSelector" -}}
{{- $parts := list -}}
{{- range $k, $v := .Values.agent.nodeSelector -}}
{{- $parts = append $parts (printf "%s=%s" $k $v) -}}
{{- end -}}
{{- join "," $parts -}}
{{- end }}

{{/* Pod-level security context shared by both workloads. */}}
{{- define "cozy-health.seccomp" -}}
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/*
A Go duration ("1m30s", "500ms") in nanoseconds, as a string to pass
through float64: values.schema.json has already checked the form.
*/}}
{{- define "cozy-health.nanos" -}}
{{- $total := 0.0 -}}
{{- $units := dict "ns" 1.0 "us" 1000.0 "µs" 1000.0 "ms" 1000000.0 "s" 1000000000.0 "m" 60000000000.0 "h" 3600000000000.0 -}}
{{- range regexFindAll "[0-9.]+(ns|us|µs|ms|s|m|h)" (toString .) -1 -}}
{{- $num := regexFind "^[0-9.]+" . -}}
{{- $total = addf $total (mulf (float64 $num) (get $units (trimPrefix $num .))) -}}
{{- end -}}
{{- $total -}}
{{- end }}

{{/*
Where the aggregator's serving certificate comes from: "cert-manager" (the
chart's Certificate writes the Secret) or "self-signed" (the aggregator keeps
it). tls.mode auto picks cert-manager when the cluster serves its API.
*/}}
{{- define "cozy-health.tlsMode" -}}
{{- $m := .Values.tls.mode -}}
{{- if eq $m "auto" -}}
{{- if .Capabilities.APIVersions.Has "cert-manager.io/v1" -}}cert-manager{{- else -}}self-signed{{- end -}}
{{- else -}}
{{- $m -}}
{{- end -}}
{{- end }}

{{/* The serving Secret and the CA ConfigMap: fixed names, the agents' and the aggregator's interface. */}}
{{- define "cozy-health.tlsSecret" -}}{{ include "cozy-health.aggregator" . }}-tls{{- end }}
{{- define "cozy-health.caConfigMap" -}}cozy-health-ca{{- end }}

{{/* The DNS names of the aggregator Service, one per line. */}}
{{- define "cozy-health.serviceNames" -}}
{{- $root := . -}}
{{- $svcs := list (include "cozy-health.aggregator" $root) (include "cozy-health.aggregatorIngest" $root) }}
{{- if $root.Values.guard.enabled }}{{- $svcs = append $svcs (include "cozy-health.guardService" $root) }}{{- end }}
{{- range $i, $svc := $svcs }}
{{- if $i }}
{{ end -}}
{{ $svc }}
{{ $svc }}.{{ $root.Release.Namespace }}
{{ $svc }}.{{ $root.Release.Namespace }}.svc
{{ $svc }}.{{ $root.Release.Namespace }}.svc.{{ include "cozy-health.clusterDomain" $root }}
{{- end }}
{{- end }}

{{/*
The cluster's DNS domain: tls.clusterDomain when set, else the
_cluster.cluster-domain Cozystack's operator injects into every package's
values (cozy.local by default there), else Kubernetes' cluster.local.
*/}}
{{- define "cozy-health.clusterDomain" -}}
{{- $d := .Values.tls.clusterDomain | default (index (.Values._cluster | default dict) "cluster-domain") | default "cluster.local" -}}
{{- trimSuffix "." $d -}}
{{- end }}

{{/* The headless Service the agents dial: every replica, ready or warming. */}}
{{- define "cozy-health.guardService" -}}{{ include "cozy-health.aggregator" . }}-guard{{- end }}
{{- define "cozy-health.guardWebhook" -}}cozy-health-drain-guard{{- end }}
{{- define "cozy-health.aggregatorIngest" -}}{{ include "cozy-health.aggregator" . }}-ingest{{- end }}

{{/*
"true" when the aggregator's NetworkPolicy is a CiliumNetworkPolicy
(networkPolicy.cilium true, or auto and cilium.io/v2 served).
*/}}
{{- define "cozy-health.ciliumPolicy" -}}
{{- $c := toString .Values.networkPolicy.cilium -}}
{{- if or (eq $c "true") (and (eq $c "auto") (.Capabilities.APIVersions.Has "cilium.io/v2")) -}}true{{- else -}}false{{- end -}}
{{- end -}}

{{/*
The agent's user: agent.runAsUser when set; else 0 while a source that only
root can reach is enabled (kube-ovn's OVS/OVN sockets, root:root 0750; the
fsync probe's host directory, created root-owned by the kubelet), and the
non-root 65532 otherwise.
*/}}
{{- define "cozy-health.agentUser" -}}
{{- $a := .Values.agent -}}
{{- $s := $a.sources -}}
{{- if ne (toString $a.runAsUser) "auto" -}}{{ $a.runAsUser }}
{{- else if or $s.kubeOVN.ovsRunPath $s.kubeOVN.ovnRunPath $s.fsyncProbe.hostPath -}}0
{{- else -}}65532
{{- end -}}
{{- end -}}

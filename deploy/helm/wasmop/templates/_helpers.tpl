{{/* The prefix of every object name: the release name, with "-wasmop" unless it says wasmop. */}}
{{- define "wasmop.fullname" -}}
{{- if contains "wasmop" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-wasmop" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "wasmop.resolverName" -}}
{{- printf "%s-resolver" (include "wasmop.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object; with selector labels (which carry the instance), commonLabels. */}}
{{- define "wasmop.commonLabels" -}}
app.kubernetes.io/part-of: wasmop
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "wasmop.labels" -}}
{{ include "wasmop.commonLabels" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Operator pods. */}}
{{- define "wasmop.selectorLabels" -}}
app.kubernetes.io/name: wasmop
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Resolver pods: the ElasticService controller finds them by this name label. */}}
{{- define "wasmop.resolverSelectorLabels" -}}
app.kubernetes.io/name: wasmop-resolver
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "wasmop.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Non-root, no privilege escalation, read-only root filesystem, no capabilities. */}}
{{- define "wasmop.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "wasmop.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* The operator's cluster-scoped needs (restart): ProxyRestartPolicies, a cluster-scoped kind,
listed and watched and their status patched; the namespaces, listed for the policies' namespace
selectors. */}}
{{- define "wasmop.clusterScopedRules" -}}
- apiGroups: ["wasmop.dev"]
  resources: ["proxyrestartpolicies"]
  verbs: ["list", "watch"]
- apiGroups: ["wasmop.dev"]
  resources: ["proxyrestartpolicies/status"]
  verbs: ["patch"]
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["list"]
{{- end -}}

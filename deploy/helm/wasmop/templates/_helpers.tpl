{{/* The chart's name: nameOverride, else "wasmop". */}}
{{- define "wasmop.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The prefix of every object name: fullnameOverride, else the release name, with "-<name>"
unless it contains the name. */}}
{{- define "wasmop.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "wasmop.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "wasmop.resolverName" -}}
{{- printf "%s-resolver" (include "wasmop.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The operator's ServiceAccount: serviceAccount.name, else the fullname when the chart
creates it, else "default". */}}
{{- define "wasmop.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "wasmop.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "wasmop.resolverServiceAccountName" -}}
{{- if .Values.resolver.serviceAccount.create -}}
{{- default (include "wasmop.resolverName" .) .Values.resolver.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.resolver.serviceAccount.name -}}
{{- end -}}
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
app.kubernetes.io/name: {{ include "wasmop.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Resolver pods: the ElasticService controller finds them by this name label (its
--resolver-selector, host/controllers/src/scaling/options.rs), so nameOverride leaves it. */}}
{{- define "wasmop.resolverSelectorLabels" -}}
app.kubernetes.io/name: wasmop-resolver
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels of a pod template: podLabels, under the common and selector labels `labels`
(a YAML map as text), which win. */}}
{{- define "wasmop.podLabels" -}}
{{- toYaml (merge (fromYaml .labels) (deepCopy (.podLabels | default dict))) -}}
{{- end -}}

{{/* [registry/]repository, then @digest when set, else :tag (the appVersion by default). */}}
{{- define "wasmop.image" -}}
{{- $repo := .Values.image.repository -}}
{{- with .Values.image.registry }}{{ $repo = printf "%s/%s" (trimSuffix "/" .) $repo }}{{ end -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" $repo .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* A default soft anti-affinity: replicas of one Deployment on different nodes when the
scheduler can. Takes the pod's selector labels (a YAML map as text). */}}
{{- define "wasmop.spreadByHostname" -}}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- . | nindent 12 }}
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

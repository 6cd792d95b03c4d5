{{/*
Labels of every object the chart renders: the one manifests/base gives every object
(app.kubernetes.io/part-of), then Helm's own. Selectors and pod templates keep the base's
name and component labels only, so a Helm install and a kustomize install select alike.
*/}}
{{- define "lessor.labels" -}}
app.kubernetes.io/part-of: lessor
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/*
lessor's namespace: the `namespace` value, else the release's (`helm install --namespace`), as
cert-manager's and external-secrets' charts do. Every namespaced object of the chart goes there
but the two whose place is fixed: the sandboxes' namespace (sandboxes.namespace) and the Role
in `default` to read the host API server's EndpointSlice.
*/}}
{{- define "lessor.namespace" -}}
{{ .Values.namespace | default .Release.Namespace }}
{{- end }}

{{/*
The image of every pod: repository@digest when image.digest is set (a digest names one build
for good, where a tag can be moved), else repository:tag, the tag defaulting to the appVersion.
*/}}
{{- define "lessor.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}
{{- end }}

{{/*
A component's ServiceAccount name, called as (list $ "operator"): serviceAccount.name, else the
name manifests/base gives it. The RoleBindings' subjects and the admission policies' match
conditions use it too, so a renamed account keeps its rights and stays confined. The two must
differ: each admission policy tells its component by this name.
*/}}
{{- define "lessor.serviceAccountName" -}}
{{- $root := index . 0 -}}
{{- $component := index . 1 -}}
{{- $operator := $root.Values.operator.serviceAccount.name | default "lessor-operator" -}}
{{- $apiserver := $root.Values.apiserver.serviceAccount.name | default "lessor-apiserver" -}}
{{- if eq $operator $apiserver -}}
{{- fail (printf "operator.serviceAccount.name and apiserver.serviceAccount.name are both %q: each component needs its own account (the admission policies tell them apart by it)" $operator) -}}
{{- end -}}
{{- if eq $component "operator" }}{{ $operator }}{{ else }}{{ $apiserver }}{{ end -}}
{{- end }}

{{/*
A component's pod template metadata, called as (list $ "operator"): the selector labels, then
podLabels (the component's over the global ones), and the annotations likewise, with
checksum/config above all of them: the pods read config.yaml at start, so `helm upgrade` with
other config values must change the template to roll them.
*/}}
{{- define "lessor.podMetadata" -}}
{{- $root := index . 0 -}}
{{- $component := index . 1 -}}
{{- $values := index $root.Values $component -}}
{{- $selector := dict "app.kubernetes.io/name" "lessor" "app.kubernetes.io/component" $component -}}
{{- $labels := merge $selector ($values.podLabels | default dict) ($root.Values.podLabels | default dict) -}}
{{- $checksum := dict "checksum/config" (include "lessor.config" $root | sha256sum) -}}
{{- $annotations := merge $checksum ($values.podAnnotations | default dict) ($root.Values.podAnnotations | default dict) -}}
labels:
  {{- toYaml $labels | nindent 2 }}
annotations:
  {{- toYaml $annotations | nindent 2 }}
{{- end }}

{{/*
What every pod of the chart shares, the test Pod included: the image pull Secrets and the pod
securityContext (by default what Pod Security `restricted` requires).
*/}}
{{- define "lessor.podCommon" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* A component's env and envFrom: the tracing values' OTEL_ variables, then its extraEnv and
extraEnvFrom. Takes (dict "component" .Values.<component> "tracing" .Values.tracing). */}}
{{- define "lessor.env" -}}
{{- $tracing := list }}
{{- with .tracing.endpoint }}
{{- $tracing = append $tracing (dict "name" "OTEL_EXPORTER_OTLP_ENDPOINT" "value" .) }}
{{- $tracing = append $tracing (dict "name" "OTEL_TRACES_SAMPLER" "value" $.tracing.sampler) }}
{{- with $.tracing.samplerArg }}
{{- $tracing = append $tracing (dict "name" "OTEL_TRACES_SAMPLER_ARG" "value" .) }}
{{- end }}
{{- end }}
{{- with concat $tracing (.component.extraEnv | default list) }}
env:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .component.extraEnvFrom }}
envFrom:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The API's container port: the port of config.apiserver.bind. */}}
{{- define "lessor.apiserverPort" -}}
{{ .Values.config.apiserver.bind | default "0.0.0.0:8000" | splitList ":" | last }}
{{- end }}

{{/* The API's metrics port: the port of config.apiserver.metricsBind. */}}
{{- define "lessor.apiserverMetricsPort" -}}
{{ .Values.config.apiserver.metricsBind | default "0.0.0.0:9090" | splitList ":" | last }}
{{- end }}

{{/* config.yaml: the values' config with the two namespaces the chart decides. */}}
{{- define "lessor.config" -}}
{{- $config := deepCopy .Values.config -}}
{{- $_ := set $config "namespace" (include "lessor.namespace" .) -}}
{{- $sandbox := get $config "agentSandbox" | default dict -}}
{{- $_ := set $sandbox "namespace" .Values.sandboxes.namespace -}}
{{- $_ := set $config "agentSandbox" $sandbox -}}
{{ toYaml $config }}
{{- end }}

{{/* priorityClassName, nodeSelector, tolerations, affinity, topologySpreadConstraints of a
component, when set. */}}
{{- define "lessor.scheduling" -}}
{{- with .priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

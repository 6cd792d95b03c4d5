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

{{- define "lessor.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
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
{{- $_ := set $config "namespace" .Values.namespace -}}
{{- $sandbox := get $config "agentSandbox" | default dict -}}
{{- $_ := set $sandbox "namespace" .Values.sandboxes.namespace -}}
{{- $_ := set $config "agentSandbox" $sandbox -}}
{{ toYaml $config }}
{{- end }}

{{/* nodeSelector, tolerations, affinity, topologySpreadConstraints of a component, when set. */}}
{{- define "lessor.scheduling" -}}
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

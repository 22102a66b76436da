{{- define "imagewatch.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "imagewatch.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "imagewatch.labels" -}}
app.kubernetes.io/name: {{ include "imagewatch.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "imagewatch.selectorLabels" -}}
app.kubernetes.io/name: {{ include "imagewatch.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The registries settings document (empty when no registry is configured). */}}
{{- define "imagewatch.registriesConfig" -}}
{{- if .Values.registries -}}
{{- dict "registries" .Values.registries | toYaml -}}
{{- end -}}
{{- end -}}

{{/* The namespaces to watch, as a JSON list: watchNamespaces plus watchNamespace (empty: all
  namespaces). */}}
{{- define "imagewatch.watchNamespaces" -}}
{{- $all := list -}}
{{- range .Values.watchNamespaces -}}
{{- $all = append $all . -}}
{{- end -}}
{{- with .Values.watchNamespace -}}
{{- $all = append $all . -}}
{{- end -}}
{{- $all | uniq | toJson -}}
{{- end -}}

{{/*
A bind address as the host part of host:port (IPv6 in brackets).
*/}}
{{- define "imagewatch.bindHost" -}}
{{- if contains ":" . -}}[{{ . }}]{{- else -}}{{ . }}{{- end -}}
{{- end }}

{{/* The chart's name, and the objects' base name (63 characters: DNS labels). */}}
{{- define "saltus.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "saltus.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The peers Service's name: fullname-peers, within 63 characters. */}}
{{- define "saltus.peersName" -}}
{{- printf "%s-peers" (include "saltus.fullname" . | trunc 57 | trimSuffix "-") }}
{{- end }}

{{- define "saltus.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "saltus.instanceLabels" . }}
app.kubernetes.io/version: {{ include "saltus.imageTag" . | trunc 63 | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Every object's labels; the component label is each object's own. */}}
{{- define "saltus.instanceLabels" -}}
app.kubernetes.io/name: {{ include "saltus.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Selects the router pods; the Services, PDB, NetworkPolicy use it. */}}
{{- define "saltus.selectorLabels" -}}
{{ include "saltus.instanceLabels" . }}
app.kubernetes.io/component: router
{{- end }}

{{- define "saltus.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "saltus.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "saltus.imageTag" -}}
{{- default .Chart.AppVersion .Values.image.tag }}
{{- end }}

{{- define "saltus.tlsSecret" -}}
{{- default (printf "%s-tls" (include "saltus.fullname" .)) .Values.tls.existingSecret }}
{{- end }}

{{- define "saltus.keysSecret" -}}
{{- default (printf "%s-api-keys" (include "saltus.fullname" .)) .Values.apiKeys.existingSecret }}
{{- end }}

{{- define "saltus.clusterKeyEnabled" -}}
{{- if and .Values.cluster.enabled (or .Values.cluster.key.existingSecret .Values.cluster.key.value) }}true{{ end }}
{{- end }}

{{- define "saltus.clusterKeySecret" -}}
{{- default (printf "%s-cluster-key" (include "saltus.fullname" .)) .Values.cluster.key.existingSecret }}
{{- end }}

{{- define "saltus.discoveryNamespace" -}}
{{- default .Release.Namespace .Values.discovery.namespace }}
{{- end }}

{{/*
saltus.yaml: the chart's keys from the values, then .Values.config (the
schema refuses the chart's keys there, so no key is set twice). Every key
is a `saltus serve` flag's name. The per-pod settings (node-name,
cluster-advertise) and state-dir are the Deployment's args.
*/}}
{{- define "saltus.config" -}}
listen: 0.0.0.0:{{ .Values.ports.http }}
# probes and Prometheus (networkPolicy.adminFrom: who else reaches it)
admin-listen: 0.0.0.0:{{ .Values.ports.admin }}
drain-timeout: {{ .Values.lifecycle.drainSeconds }}s
{{- if .Values.tls.enabled }}
tls-cert-file: /var/run/secrets/saltus/tls/tls.crt
tls-key-file: /var/run/secrets/saltus/tls/tls.key
{{- end }}
{{- if .Values.apiKeys.enabled }}
api-keys-file: /var/run/secrets/saltus/keys/keys.yaml
{{- end }}
{{- with .Values.backends }}
backends:
{{- range . }}
  - {{ if .name }}{{ printf "%s=%s" .name .url | quote }}{{ else }}{{ .url | quote }}{{ end }}
{{- end }}
{{- $models := list }}
{{- $caps := list }}
{{- $prio := list }}
{{- range . }}
{{- $id := default .url .name }}
{{- range .models }}{{ $models = append $models (printf "%s=%s" $id .) }}{{ end }}
{{- if .maxConcurrency }}{{ $caps = append $caps (printf "%s=%d" $id (int .maxConcurrency)) }}{{ end }}
{{- if .priority }}{{ $prio = append $prio $id }}{{ end }}
{{- end }}
{{- with $models }}
backend-models: {{ toJson . }}
{{- end }}
{{- with $caps }}
backend-max-concurrency: {{ toJson . }}
{{- end }}
{{- with $prio }}
backend-priority: {{ toJson . }}
{{- end }}
{{- end }}
{{- if .Values.discovery.enabled }}
discovery: k8s
{{- with .Values.discovery.service }}
k8s-service: {{ . | quote }}
{{- end }}
k8s-namespace: {{ include "saltus.discoveryNamespace" . | quote }}
{{- with .Values.discovery.portName }}
k8s-port-name: {{ . | quote }}
{{- end }}
{{- with .Values.discovery.modelSelectors }}
k8s-model-selector:
{{- range $model, $sel := . }}
  - {{ printf "%s=%s" $model $sel | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- if .Values.cluster.enabled }}
cluster-bind: 0.0.0.0:{{ .Values.ports.gossip }}
# every router's IP, ready or not (the headless peers Service)
join: [{{ printf "%s:%d" (include "saltus.peersName" .) (int .Values.ports.gossip) | quote }}]
{{- if include "saltus.clusterKeyEnabled" . }}
cluster-key-file: /var/run/secrets/saltus/cluster/cluster.key
{{- end }}
{{- end }}
{{- $rest := dict }}
{{- range $k, $v := .Values.config }}
{{- if not (kindIs "invalid" $v) }}{{ $_ := set $rest $k $v }}{{ end }}
{{- end }}
{{- with $rest }}
{{ toYaml . }}
{{- end }}
{{- end }}

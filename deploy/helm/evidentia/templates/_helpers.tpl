{{/* The Deployments, in pipeline order: one a service, and `retriever-search` when the retriever's searches run
apart from its writes (services.retriever-search.enabled). */}}
{{- define "evidentia.services" -}}
fetcher parser embedder retriever synthesizer gateway{{ if dig "retriever-search" "enabled" false .Values.services }} retriever-search{{ end }}
{{- end -}}

{{- define "evidentia.labels" -}}
app.kubernetes.io/part-of: evidentia
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* selector labels of one service: (dict "name" NAME "root" $) */}}
{{- define "evidentia.selector" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/part-of: evidentia
{{- end -}}

{{/* The image of a service: (dict "name" NAME "root" $) */}}
{{- define "evidentia.image" -}}
{{- $svc := index .root.Values.services .name -}}
{{- if $svc.image -}}
{{ $svc.image }}
{{- else if .root.Values.image.registry -}}
{{ printf "%s/evidentia-%s:%s" (trimSuffix "/" .root.Values.image.registry) .name (toString .root.Values.image.tag) }}
{{- else -}}
{{ printf "evidentia-%s:%s" .name (toString .root.Values.image.tag) }}
{{- end -}}
{{- end -}}

{{- define "evidentia.secretName" -}}
{{- .Values.secrets.existingSecret | default "evidentia-secrets" -}}
{{- end -}}

{{- define "evidentia.serviceAccountName" -}}
{{- .Values.serviceAccount.name | default "evidentia" -}}
{{- end -}}

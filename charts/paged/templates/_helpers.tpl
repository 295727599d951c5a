{{/* Names and labels shared by every template. */}}

{{- define "paged.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "paged.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "paged.selectorLabels" -}}
app.kubernetes.io/name: {{ include "paged.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "paged.labels" -}}
{{ include "paged.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: paged
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "paged.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "paged.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "paged.routerClusterRole" -}}
{{- printf "%s-router" (include "paged.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- /* The operator's image; paged-router ships in it, so it is also the routers' default. */ -}}
{{- define "paged.operatorImage" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{- /* What an unset spec.engine.image / spec.router.image means (the operator's --engine-image, --router-image). */ -}}
{{- define "paged.engineImage" -}}
{{- with .Values.images.engine -}}
{{- printf "%s:%s" .repository (.tag | default $.Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{- define "paged.routerImage" -}}
{{- if .Values.images.router.repository -}}
{{- printf "%s:%s" .Values.images.router.repository (.Values.images.router.tag | default .Chart.AppVersion) -}}
{{- else -}}
{{- include "paged.operatorImage" . -}}
{{- end -}}
{{- end -}}

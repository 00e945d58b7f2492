{{/* Name of the release's objects: the release name when it already says "kora", else "<release>-kora". */}}
{{- define "kora.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kora.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{/* Labels of every object of the release; kora.labels adds the operator's component (its pod selector). */}}
{{- define "kora.commonLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kora
{{- end -}}

{{- define "kora.labels" -}}
{{ include "kora.commonLabels" . }}
app.kubernetes.io/component: operator
{{- end -}}

{{/* The web console's objects: "<fullname>-console", with their own component (never the operator's pods). */}}
{{- define "kora.consoleName" -}}
{{- printf "%s-console" (include "kora.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kora.consoleSelectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: console
{{- end -}}

{{- define "kora.consoleLabels" -}}
{{ include "kora.commonLabels" . }}
app.kubernetes.io/component: console
{{- end -}}

{{- define "kora.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kora.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false (an existing service account)" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The image every Kora workload runs: repository:tag, the tag defaulting to Kora's version (appVersion). */}}
{{- define "kora.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* The image of Hosted ModelAPIs: image.embeddings, else the main image's reference with "-embeddings" added
to its tag (the tag scripts/image/build.sh --extras embeddings gives the variant). */}}
{{- define "kora.embeddingsImage" -}}
{{- .Values.image.embeddings | default (printf "%s-embeddings" (include "kora.image" .)) -}}
{{- end -}}

{{- define "kora.gatewayNamespace" -}}
{{- .Values.gatewayAPI.gatewayNamespace | default .Release.Namespace -}}
{{- end -}}

{{- define "kora.webhookService" -}}
{{- printf "%s-webhook" (include "kora.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Combinations the schema cannot say (it checks each value alone). The operator refuses the same combinations at
start-up (kora/operator/settings.py); failing here says so at `helm install`, in terms of values, not variables.
*/}}
{{- define "kora.validate" -}}
{{- $gw := .Values.gatewayAPI -}}
{{- if $gw.createGateway -}}
{{- if not $gw.enabled -}}
{{- fail "gatewayAPI.createGateway needs gatewayAPI.enabled=true (the Gateway exists for the operator's HTTPRoutes)" -}}
{{- end -}}
{{- $_ := required "gatewayAPI.gatewayClassName is required when gatewayAPI.createGateway is true: the GatewayClass of your gateway controller (kubectl get gatewayclasses)" $gw.gatewayClassName -}}
{{- end -}}
{{- $op := .Values.operator -}}
{{- if $op.metrics.enabled -}}
{{- if eq (int $op.metrics.port) (int $op.livenessPort) -}}
{{- fail "operator.metrics.port must differ from operator.livenessPort (each endpoint has its own port)" -}}
{{- end -}}
{{- if and $op.webhook.enabled (eq (int $op.metrics.port) (int $op.webhook.port)) -}}
{{- fail "operator.metrics.port must differ from operator.webhook.port (each endpoint has its own port)" -}}
{{- end -}}
{{- end -}}
{{- if .Values.security.strictGatewayApi.enabled -}}
{{- if not $gw.enabled -}}
{{- fail "security.strictGatewayApi.enabled needs gatewayAPI.enabled=true (workloads reach each other through the Gateway)" -}}
{{- end -}}
{{- $_ := required "gatewayAPI.internalURL is required when security.strictGatewayApi.enabled is true: the in-cluster URL of the Gateway, which workloads call each other through" $gw.internalURL -}}
{{- end -}}
{{- $console := .Values.console -}}
{{- if $console.enabled -}}
{{- $_ := required "console.accessTokenSecret is required when console.enabled is true: the console shows every user's sessions and memory and can erase users, and its ClusterIP Service is reachable from every pod, so it asks for the token in that Secret (key token)" $console.accessTokenSecret -}}
{{- end -}}
{{- if $console.gatewayRoute.enabled -}}
{{- if not $console.enabled -}}
{{- fail "console.gatewayRoute.enabled needs console.enabled=true (there is no console to route to)" -}}
{{- end -}}
{{- if not $gw.enabled -}}
{{- fail "console.gatewayRoute.enabled needs gatewayAPI.enabled=true (the route attaches to the Gateway)" -}}
{{- end -}}
{{- $_ := required "console.accessTokenSecret is required when console.gatewayRoute.enabled is true: the console shows every user's sessions and memory, so on the Gateway it asks for the token in that Secret (key token)" $console.accessTokenSecret -}}
{{- end -}}
{{- end -}}

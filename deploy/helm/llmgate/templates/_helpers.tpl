{{/* Names and labels. */}}
{{- define "llmgate.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "llmgate.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "llmgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "llmgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "llmgate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "llmgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "llmgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "llmgate.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "llmgate.secretName" -}}
{{- default (include "llmgate.fullname" .) .Values.secret.existingSecret -}}
{{- end -}}

{{/* Whether a database URL and a Redis URL are configured (value or secret). */}}
{{- define "llmgate.hasDatabase" -}}
{{- if or .Values.database.url .Values.secret.existingSecret .Values.secret.databaseURL -}}true{{- end -}}
{{- end -}}
{{- define "llmgate.hasRedis" -}}
{{- if or .Values.redis.url .Values.secret.existingSecret .Values.secret.redisURL -}}true{{- end -}}
{{- end -}}

{{/* The most replicas that may run: replicaCount, or the autoscaler's maximum. */}}
{{- define "llmgate.maxReplicas" -}}
{{- if .Values.autoscaling.enabled -}}{{ .Values.autoscaling.maxReplicas }}{{- else -}}{{ .Values.replicaCount }}{{- end -}}
{{- end -}}

{{/* Refuse values that would run a broken gateway, saying what to set. */}}
{{- define "llmgate.validate" -}}
{{- $max := include "llmgate.maxReplicas" . | int -}}
{{- if and (gt $max 1) (not (include "llmgate.hasDatabase" .)) -}}
{{- fail (printf "llmgate: %d replicas need a shared PostgreSQL database (each replica would keep its own SQLite ledger and keys): set secret.databaseURL (or secret.existingSecret with key %q), or replicaCount: 1" $max .Values.secret.keys.databaseURL) -}}
{{- end -}}
{{- if and (gt $max 1) (not (include "llmgate.hasRedis" .)) -}}
{{- fail (printf "llmgate: %d replicas need a shared Redis (rate limits and budgets would be counted per replica, multiplying what each key may spend): set secret.redisURL (or secret.existingSecret with key %q), or replicaCount: 1" $max .Values.secret.keys.redisURL) -}}
{{- end -}}
{{- if and (not .Values.secret.existingSecret) (not .Values.secret.masterKey) -}}
{{- fail "llmgate: set secret.masterKey (an admin key of your choosing, for example sk-lg-$(openssl rand -hex 16)) or secret.existingSecret naming a Secret that holds it" -}}
{{- end -}}
{{- if not (has .Values.workload (list "StatefulSet" "Deployment")) -}}
{{- fail (printf "llmgate: workload must be StatefulSet or Deployment, not %q" .Values.workload) -}}
{{- end -}}
{{- if and (eq .Values.workload "Deployment") (not (include "llmgate.hasDatabase" .)) -}}
{{- fail "llmgate: workload: Deployment keeps nothing across pod restarts: a SQLite database there would lose every key; use PostgreSQL (secret.databaseURL) or workload: StatefulSet" -}}
{{- end -}}
{{- end -}}

{{/* The gateway's config file: the user's config with the settings the chart owns. */}}
{{- define "llmgate.config" -}}
{{- $cfg := deepCopy (default dict .Values.config) -}}
{{- if include "llmgate.hasDatabase" . -}}
{{- $_ := set $cfg "database" "${LLMGATE_DATABASE_URL}" -}}
{{- else -}}
{{- $_ := set $cfg "database" "/data/llmgate.db" -}}
{{- end -}}
{{- if include "llmgate.hasRedis" . -}}
{{- $_ := set $cfg "redis" "${LLMGATE_REDIS_URL}" -}}
{{- end -}}
{{- $_ := set $cfg "spool_dir" "/data/spool" -}}
{{- $_ := unset $cfg "listen" -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/* Seconds a stopping pod may take: preStop, requests in flight, a margin. */}}
{{- define "llmgate.terminationGrace" -}}
{{- $timeout := 30 -}}
{{- with .Values.config.shutdown_timeout -}}
{{- $s := toString . -}}
{{- if hasSuffix "m" $s -}}{{- $timeout = mul (trimSuffix "m" $s | int) 60 -}}
{{- else if hasSuffix "s" $s -}}{{- $timeout = trimSuffix "s" $s | int -}}
{{- else -}}{{- fail (printf "llmgate: config.shutdown_timeout %q: write it in seconds or minutes, such as 60s or 2m" $s) -}}
{{- end -}}
{{- end -}}
{{- add .Values.shutdown.preStopSleepSeconds $timeout .Values.shutdown.marginSeconds -}}
{{- end -}}

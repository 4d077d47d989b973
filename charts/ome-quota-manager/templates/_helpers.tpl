{{/*
The objects' names are fixed: the webhook's Secret and configuration have
product names (one install per cluster), and the manager's flags default to
them.
*/}}
{{- define "oqm.name" -}}ome-quota-manager{{- end }}

{{- define "oqm.selectorLabels" -}}
app.kubernetes.io/name: ome-quota-manager
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "oqm.labels" -}}
{{ include "oqm.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* The mode has no default: rendering fails without one. */}}
{{- define "oqm.mode" -}}
{{- $mode := .Values.quotaManager.mode | default "" -}}
{{- if not (has $mode (list "workload" "management")) -}}
{{- fail (printf "quotaManager.mode must be \"workload\" or \"management\", got %q" $mode) -}}
{{- end -}}
{{- $mode -}}
{{- end }}

{{- define "oqm.image" -}}
{{- $img := .Values.quotaManager.image -}}
{{- $repo := $img.repository -}}
{{- with .Values.global.hub }}{{ $repo = printf "%s/%s" (trimSuffix "/" .) $repo }}{{ end -}}
{{- printf "%s:%s" $repo ($img.tag | default .Chart.AppVersion) -}}
{{- end }}

{{- define "oqm.webhookService" -}}{{ include "oqm.name" . }}-webhook{{- end }}
{{- define "oqm.metricsService" -}}{{ include "oqm.name" . }}-metrics{{- end }}
{{- define "oqm.webhookSecret" -}}ome-quota-manager-webhook-cert{{- end }}
{{- define "oqm.webhookConfig" -}}ome-quota-manager.ome.io{{- end }}
{{- define "oqm.webhookLedger" -}}ome-quota-manager{{- end }}

{{/* The manager's flags, one per value. */}}
{{- define "oqm.args" -}}
{{- $q := .Values.quotaManager -}}
- --mode={{ include "oqm.mode" . }}
{{- with $q.materialize.enrolledNamespaces }}
- --enrolled-namespaces={{ join "," . }}
{{- end }}
{{- range (include "oqm.members" . | fromJsonArray) }}
- --member={{ .name }}=/etc/ome-quota-manager/members/{{ .name }}/kubeconfig
{{- end }}
{{- with $q.projection.origin }}
- --origin={{ . }}
{{- end }}
- --capacity-resources={{ join "," $q.capacity.resources }}
{{- $cover := list -}}
{{- range $k, $v := $q.materialize.coverResources }}
{{- $cover = append $cover (printf "%s=%s" $k (ternary $v (toString (int64 $v)) (kindIs "string" $v))) -}}
{{- end }}
{{- with $cover }}
- --cover-resources={{ join "," . }}
{{- end }}
- --capacity-hysteresis-percent={{ int $q.capacity.hysteresisPercent }}
- --capacity-report-interval={{ $q.capacity.reportInterval | default "0s" }}
- --resync-interval={{ $q.resyncInterval }}
- --max-tree-depth={{ int $q.maxTreeDepth }}
- --metrics-bind-address=:{{ int $q.metrics.port }}
- --metrics-secure={{ $q.metrics.secure }}
- --health-probe-bind-address=:{{ int $q.healthPort }}
- --kube-api-qps={{ $q.client.qps }}
- --kube-api-burst={{ int $q.client.burst }}
- --apply-workers={{ int $q.client.applyWorkers }}
- --leader-elect=true
- --leader-election-id={{ include "oqm.name" . }}
- --leader-election-identity=$(POD_NAME)
- --leader-election-lease-duration={{ $q.leaderElection.leaseDuration }}
- --leader-election-renew-deadline={{ $q.leaderElection.renewDeadline }}
- --leader-election-retry-period={{ $q.leaderElection.retryPeriod }}
- --webhook={{ $q.webhook.enabled }}
{{- if $q.webhook.enabled }}
- --webhook-port={{ int $q.webhook.port }}
- --webhook-cert-secret={{ .Release.Namespace }}/{{ include "oqm.webhookSecret" . }}
- --webhook-config-name={{ include "oqm.webhookConfig" . }}
- --webhook-service={{ .Release.Namespace }}/{{ include "oqm.webhookService" . }}
- --webhook-ledger={{ include "oqm.webhookLedger" . }}
{{- with $q.webhook.clientCA.secretName }}
- --webhook-client-ca=/etc/ome-quota-manager/webhook-client-ca/{{ $q.webhook.clientCA.key }}
{{- end }}
{{- with (include "oqm.projectionWriters" .) }}
- --webhook-projection-writers={{ . }}
{{- end }}
{{- end }}
{{- if $q.eventLog.enabled }}
{{- if $q.eventLog.persistentVolumeClaim }}
{{- /* The claim is shared: a folder per pod, and the folders of pods gone
for longer than maxAge are removed. */}}
- --event-log=/var/lib/ome-quota-manager/events/$(POD_NAME)
{{- if not (has (toString $q.eventLog.maxAge) (list "" "0" "0s")) }}
- --event-log-prune-siblings=true
{{- end }}
{{- else }}
- --event-log=/var/lib/ome-quota-manager/events
{{- end }}
- --event-log-max-bytes={{ int64 $q.eventLog.maxBytes }}
- --event-log-max-age={{ $q.eventLog.maxAge }}
- --event-log-sync={{ $q.eventLog.sync }}
{{- end }}
- --dra={{ $q.dra.enabled }}
{{- if and $q.dra.enabled $q.dra.deviceClassMappings }}
- --dra-config=/etc/ome-quota-manager/dra/config.yaml
- --dra-config-poll-interval={{ $q.dra.configPollInterval }}
{{- end }}
{{- if $q.dra.enabled }}
- --dra-kueue-config={{ include "oqm.kueueConfig" . }}
{{- end }}
- --v={{ int $q.log.level }}
- --logging-format={{ $q.log.format }}
{{- end }}

{{/*
The sources the NetworkPolicy admits to the webhook port, as a JSON list of
CIDRs: networkPolicy.apiServerCIDRs when set; otherwise the API server's
own addresses, looked up at install and upgrade (a /32 or /128 each) in the
kubernetes EndpointSlice of namespace default, or, on a cluster without it,
in the kubernetes Endpoints (v1 Endpoints are deprecated: reading them makes
helm print a warning). Empty when none is found (helm template has no
cluster to look in): the policy then admits every source on that port.
*/}}
{{- define "oqm.webhookSources" -}}
{{- $cidrs := .Values.quotaManager.networkPolicy.apiServerCIDRs | default list -}}
{{- if not $cidrs -}}
{{- $ips := list -}}
{{- $slice := lookup "discovery.k8s.io/v1" "EndpointSlice" "default" "kubernetes" | default dict -}}
{{- range ($slice.endpoints | default list) -}}
{{- $ips = concat $ips (.addresses | default list) -}}
{{- end -}}
{{- if not $slice -}}
{{- $ep := lookup "v1" "Endpoints" "default" "kubernetes" | default dict -}}
{{- range ($ep.subsets | default list) -}}
{{- range (.addresses | default list) -}}
{{- $ips = append $ips .ip -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $ips -}}
{{- $cidrs = append $cidrs (printf "%s/%s" . (ternary "128" "32" (contains ":" .))) -}}
{{- end -}}
{{- end -}}
{{- toJson (uniq $cidrs) -}}
{{- end }}

{{/*
oqm.kueueConfig is Kueue's configuration ConfigMap (namespace/name) that
the manager compares its DRA mappings with: dra.kueueConfig while DRA is on
and Kueue's namespace exists at install (the chart can grant the read
there), "" otherwise (nothing compared).
*/}}
{{- define "oqm.kueueConfig" -}}
{{- $q := .Values.quotaManager -}}
{{- if and $q.dra.enabled $q.dra.kueueConfig -}}
{{- if lookup "v1" "Namespace" "" (first (splitList "/" $q.dra.kueueConfig)) -}}
{{ $q.dra.kueueConfig }}
{{- end -}}
{{- end -}}
{{- end }}

{{/*
The identities remoteAccess binds, as the webhook's --webhook-projection-writers
takes them: the only ones that may change the copies a management plane
projects here. Empty without remoteAccess.
*/}}
{{- define "oqm.projectionWriters" -}}
{{- $r := .Values.quotaManager.remoteAccess -}}
{{- $out := list -}}
{{- if $r.enabled -}}
{{- if $r.serviceAccount.create -}}
{{- $out = append $out (printf "system:serviceaccount:%s:%s" .Release.Namespace (default (printf "%s-remote-access" (include "oqm.name" .)) $r.name)) -}}
{{- end -}}
{{- range $r.subjects -}}
{{- if eq .kind "ServiceAccount" -}}
{{- $out = append $out (printf "system:serviceaccount:%s:%s" .namespace .name) -}}
{{- else if eq .kind "Group" -}}
{{- $out = append $out (printf "group:%s" .name) -}}
{{- else -}}
{{- $out = append $out .name -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- join "," $out -}}
{{- end }}

{{/*
The member clusters of a management plane (projection.members), as a JSON
list; empty in workload mode. Each is mounted from its Secret and passed as
--member NAME=PATH. A plane without members or with enrolled namespaces,
and members in workload mode, fail the render with what to fix.
*/}}
{{- define "oqm.members" -}}
{{- $p := .Values.quotaManager.projection -}}
{{- $mode := include "oqm.mode" . -}}
{{- if and (eq $mode "management") (not $p.members) -}}
{{- fail "quotaManager.projection.members is empty: a management plane needs at least one member cluster ({name, secretName} with a kubeconfig in the Secret)" -}}
{{- end -}}
{{- if and (eq $mode "management") .Values.quotaManager.materialize.enrolledNamespaces -}}
{{- fail "quotaManager.materialize.enrolledNamespaces is set but quotaManager.mode is management: a plane writes no Kueue objects of its own (each member's install enrolls its namespaces)" -}}
{{- end -}}
{{- if and (eq $mode "workload") $p.members -}}
{{- fail "quotaManager.projection.members is set but quotaManager.mode is workload: only a management plane has member clusters" -}}
{{- end -}}
{{- toJson ($p.members | default list) -}}
{{- end }}

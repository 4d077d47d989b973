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
{{- $inv := include "oqm.inventory" . }}
{{- if eq $inv "clusterprofiles" }}
- --members-from=clusterprofiles
- --clusterprofile-namespace={{ $q.projection.clusterProfiles.namespace | default .Release.Namespace }}
{{- with $q.projection.clusterProfiles.selector }}
- {{ printf "--clusterprofile-selector=%s" . | quote }}
{{- end }}
- --clusterprofile-provider-file=/etc/ome-quota-manager/clusterprofiles/providers.json
{{- else if eq $inv "secrets" }}
- --members-from=secrets
- --members-configmap={{ include "oqm.membersConfigMap" . }}
- --members-namespace={{ .Release.Namespace }}
{{- if $q.projection.allowInsecureKubeconfigs }}
- --members-allow-insecure-kubeconfigs=true
{{- end }}
{{- end }}
{{- with $q.projection.origin }}
- --origin={{ . }}
{{- end }}
{{- if eq $q.mode "management" }}
- --member-grace={{ $q.projection.memberGrace | default "5m" }}
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
- --webhook-timeout={{ int $q.webhook.timeoutSeconds }}s
- --webhook-cert-secret={{ .Release.Namespace }}/{{ include "oqm.webhookSecret" . }}
- --webhook-config-name={{ include "oqm.webhookConfig" . }}
- --webhook-service={{ .Release.Namespace }}/{{ include "oqm.webhookService" . }}
- --webhook-ledger={{ include "oqm.webhookLedger" . }}
{{- if $q.webhook.clientCA.secretName }}
- --webhook-client-ca=/etc/ome-quota-manager/webhook-client-ca/{{ $q.webhook.clientCA.key }}
{{- else if $q.webhook.clientAuth.enabled }}
- --webhook-client-ca-configmap={{ $q.webhook.clientAuth.configMap }}:{{ $q.webhook.clientAuth.key }}
{{- end }}
{{- if and $q.webhook.clientAuth.enabled $q.webhook.clientAuth.names }}
- --webhook-client-names={{ join "," $q.webhook.clientAuth.names }}
{{- end }}
{{- if $q.networkPolicy.enabled }}
- --webhook-network-policy={{ .Release.Namespace }}/{{ include "oqm.name" . }}
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
cluster to look in): the policy then fails to render, rather than admit
every source on that port.
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
in workload mode and Kueue's namespace exists at install (the chart can
grant the read there), "" otherwise (nothing compared; a plane measures
nothing of its own cluster).
*/}}
{{- define "oqm.kueueConfig" -}}
{{- $q := .Values.quotaManager -}}
{{- if and $q.dra.enabled $q.dra.kueueConfig (eq (include "oqm.mode" .) "workload") -}}
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
oqm.inventory is where a management plane lists its members
(--members-from): "clusterprofiles" (projection.clusterProfiles) or
"secrets" (projection.clusters, rendered into a ConfigMap); "" in workload
mode. It fails the render, saying what to fix, on the old
projection.members, on a plane with neither way or both, on either way (or
an origin) in workload mode, on a plane with enrolled namespaces, on a
selector that is not one, and on a cluster listed twice.
*/}}
{{- define "oqm.inventory" -}}
{{- $q := .Values.quotaManager -}}
{{- $p := $q.projection -}}
{{- $cp := $p.clusterProfiles | default dict -}}
{{- $clusters := $p.clusters | default list -}}
{{- $mode := include "oqm.mode" . -}}
{{- if hasKey $p "members" -}}
{{- fail "quotaManager.projection.members was renamed quotaManager.projection.clusters (the same entries: name, secretName, key): rename it in your values" -}}
{{- end -}}
{{- $cpSet := list -}}
{{- range $k := list "namespace" "selector" "tokenSecrets" -}}
{{- if get $cp $k }}{{ $cpSet = append $cpSet (printf "quotaManager.projection.clusterProfiles.%s" $k) }}{{ end -}}
{{- end -}}
{{- range $k, $v := ($cp.plugins | default dict) -}}
{{- if $v }}{{ $cpSet = append $cpSet (printf "quotaManager.projection.clusterProfiles.plugins.%s" $k) }}{{ end -}}
{{- end -}}
{{- if eq $mode "workload" -}}
{{- $set := list -}}
{{- if $cp.enabled }}{{ $set = append $set "quotaManager.projection.clusterProfiles.enabled" }}{{ end -}}
{{- $set = concat $set $cpSet -}}
{{- if $clusters }}{{ $set = append $set "quotaManager.projection.clusters" }}{{ end -}}
{{- if $p.allowInsecureKubeconfigs }}{{ $set = append $set "quotaManager.projection.allowInsecureKubeconfigs" }}{{ end -}}
{{- if $p.origin }}{{ $set = append $set "quotaManager.projection.origin" }}{{ end -}}
{{- with $set -}}
{{- fail (printf "%s %s set but quotaManager.mode is workload: only a management plane has member clusters, and a cluster runs one mode; drop %s from this release (a plane's members are listed in the plane's own release)" (join ", " .) (ternary "is" "are" (eq (len .) 1)) (ternary "it" "them" (eq (len .) 1))) -}}
{{- end -}}
{{- else -}}
{{- if $q.materialize.enrolledNamespaces -}}
{{- fail "quotaManager.materialize.enrolledNamespaces is set but quotaManager.mode is management: a plane writes no Kueue objects of its own (each member's install enrolls its namespaces)" -}}
{{- end -}}
{{- if and $cp.enabled $clusters -}}
{{- fail "quotaManager.projection.clusterProfiles.enabled is true and quotaManager.projection.clusters is set: a plane reads its members one way; keep the ClusterProfiles or the list of kubeconfig Secrets" -}}
{{- end -}}
{{- if and (not $cp.enabled) $cpSet -}}
{{- fail (printf "%s %s set but quotaManager.projection.clusterProfiles.enabled is false: set it to true to read the members from ClusterProfiles, or drop %s" (join ", " $cpSet) (ternary "is" "are" (eq (len $cpSet) 1)) (ternary "it" "them" (eq (len $cpSet) 1))) -}}
{{- end -}}
{{- if and $cp.enabled $p.allowInsecureKubeconfigs -}}
{{- fail "quotaManager.projection.allowInsecureKubeconfigs is set but the members are ClusterProfiles, which the plane reaches without a kubeconfig: drop it (it is for kubeconfig Secrets of test clusters, under quotaManager.projection.clusters)" -}}
{{- end -}}
{{- if $cp.enabled -}}
{{- $key := `([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?` -}}
{{- $val := `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?` -}}
{{- $req := printf `\s*(!\s*%[1]s|%[1]s(\s*(==?|!=)\s*(%[2]s)?|\s*[<>]\s*-?[0-9]+|\s+(in|notin)\s*\(\s*(%[2]s)?(\s*,\s*(%[2]s)?)*\s*\))?)\s*` $key $val -}}
{{- if not (regexMatch (printf `^(%[1]s(,%[1]s)*)?$` $req) ($cp.selector | default "")) -}}
{{- fail (printf "quotaManager.projection.clusterProfiles.selector=%q is not a label selector: write it as kubectl -l takes it, e.g. fleet=gpu or \"fleet in (gpu,tpu),!retired\"; empty picks every ClusterProfile of the namespace" $cp.selector) -}}
{{- end -}}
{{- if not $cp.providers -}}
{{- fail "quotaManager.projection.clusterProfiles.providers is empty: list the credential providers that reach the profiles' access providers (the default runs the image's secret-reader plugin)" -}}
{{- end -}}
clusterprofiles
{{- else if $clusters -}}
{{- $names := list -}}
{{- range $clusters -}}
{{- if has .name $names -}}
{{- fail (printf "quotaManager.projection.clusters lists %s twice: each member once, with the Secret of its kubeconfig" .name) -}}
{{- end -}}
{{- $names = append $names .name -}}
{{- end -}}
secrets
{{- else -}}
{{- fail "quotaManager.mode is management but no member cluster is given: set quotaManager.projection.clusterProfiles.enabled=true (the members are ClusterProfiles) or list quotaManager.projection.clusters (each a name and the Secret of its kubeconfig); docs/install.md, Connecting a plane and its members" -}}
{{- end -}}
{{- end -}}
{{- end }}

{{- define "oqm.membersConfigMap" -}}ome-quota-manager-members{{- end }}

{{/*
oqm.plugins: the credential plugins' part of the pod, as YAML (initContainers,
volumes, volumeMounts, each a list), from
projection.clusterProfiles.plugins; the lists are empty unless the members
are ClusterProfiles. Each init container gets the emptyDir credential-plugins
at /plugins, which the manager mounts read-only there, and the manager's
securityContext when it gives none. It fails the render on a volume or mount
that takes a name or path of the chart's own.
*/}}
{{- define "oqm.plugins" -}}
{{- $out := dict "initContainers" list "volumes" list "volumeMounts" list -}}
{{- if eq (include "oqm.inventory" .) "clusterprofiles" -}}
{{- $pl := .Values.quotaManager.projection.clusterProfiles.plugins | default dict -}}
{{- $ownNames := list "event-log" "dra-config" "webhook-client-ca" "clusterprofile-providers" "credential-plugins" -}}
{{- $ownPaths := list "/var/lib/ome-quota-manager/events" "/etc/ome-quota-manager/dra" "/etc/ome-quota-manager/webhook-client-ca" "/etc/ome-quota-manager/clusterprofiles" -}}
{{- if $pl.initContainers }}{{ $ownPaths = append $ownPaths "/plugins" }}{{ end -}}
{{- range ($pl.volumes | default list) -}}
{{- if has .name $ownNames -}}
{{- fail (printf "quotaManager.projection.clusterProfiles.plugins.volumes names a volume %s, which the chart uses itself: name it otherwise" .name) -}}
{{- end -}}
{{- end -}}
{{- range ($pl.volumeMounts | default list) -}}
{{- if has (trimSuffix "/" .mountPath) $ownPaths -}}
{{- fail (printf "quotaManager.projection.clusterProfiles.plugins.volumeMounts mounts %s at %s, where the chart mounts a volume of its own: mount it elsewhere (with initContainers, plugins are copied to /plugins)" .name .mountPath) -}}
{{- end -}}
{{- end -}}
{{- $inits := list -}}
{{- range ($pl.initContainers | default list) -}}
{{- $c := deepCopy . -}}
{{- $_ := set $c "volumeMounts" (append ($c.volumeMounts | default list) (dict "name" "credential-plugins" "mountPath" "/plugins")) -}}
{{- if not $c.securityContext -}}
{{- $_ := set $c "securityContext" (dict "allowPrivilegeEscalation" false "readOnlyRootFilesystem" true "runAsNonRoot" true "capabilities" (dict "drop" (list "ALL"))) -}}
{{- end -}}
{{- $inits = append $inits $c -}}
{{- end -}}
{{- $vols := $pl.volumes | default list -}}
{{- $mounts := $pl.volumeMounts | default list -}}
{{- if $inits -}}
{{- $vols = prepend $vols (dict "name" "credential-plugins" "emptyDir" dict) -}}
{{- $mounts = prepend $mounts (dict "name" "credential-plugins" "mountPath" "/plugins" "readOnly" true) -}}
{{- end -}}
{{- $out = dict "initContainers" $inits "volumes" $vols "volumeMounts" $mounts -}}
{{- end -}}
{{- toYaml $out -}}
{{- end }}
{{- define "oqm.providersConfigMap" -}}ome-quota-manager-clusterprofile-providers{{- end }}

{{/* The credential providers file, as --clusterprofile-provider-file reads it. */}}
{{- define "oqm.providersFile" -}}
{{- toPrettyJson (dict "providers" .Values.quotaManager.projection.clusterProfiles.providers) }}
{{- end }}

{{/*
oqm.tokenSecrets: whether the plane reads its members' tokens from Secrets
of its namespace (a provider named secretreader, the name the
secret-reader plugin answers to), as "true" or "".
*/}}
{{- define "oqm.tokenSecrets" -}}
{{- if eq (include "oqm.inventory" .) "clusterprofiles" -}}
{{- range .Values.quotaManager.projection.clusterProfiles.providers -}}
{{- if eq .name "secretreader" }}true{{ break }}{{ end -}}
{{- end -}}
{{- end -}}
{{- end }}

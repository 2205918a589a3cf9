{{/* app.kubernetes.io/name: nameOverride or "drakit". */}}
{{- define "drakit.name" -}}{{ .Values.nameOverride | default "drakit" | trunc 63 | trimSuffix "-" }}{{- end }}

{{/* The prefix of every object name: fullnameOverride, <release>-<nameOverride>, or the
release name (so the default release `drakit` keeps the names drakit-kubelet-plugin, …). */}}
{{- define "drakit.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if .Values.nameOverride -}}
{{- printf "%s-%s" .Release.Name .Values.nameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end }}

{{/* The agent's object names: <fullname>-kubelet-plugin etc. */}}
{{- define "drakit.agent" -}}{{ include "drakit.fullname" . }}-kubelet-plugin{{- end }}

{{/* The agents' ServiceAccount: serviceAccount.name, else <fullname>-kubelet-plugin when
the chart creates it; an existing one must be named. */}}
{{- define "drakit.serviceAccount" -}}
{{- if .Values.serviceAccount.name -}}
{{- .Values.serviceAccount.name -}}
{{- else if .Values.serviceAccount.create -}}
{{- include "drakit.agent" . -}}
{{- else -}}
{{- fail "serviceAccount.name: name the existing ServiceAccount when serviceAccount.create is false" -}}
{{- end -}}
{{- end }}

{{/* Labels of every object. */}}
{{- define "drakit.labels" -}}
app.kubernetes.io/name: {{ include "drakit.name" . }}
{{- if not .Values.plainManifests }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}
{{- end }}

{{/* The DaemonSet's selector (immutable once installed): selectorLabelsOverride, else
name, component and (with Helm) instance. */}}
{{- define "drakit.selector" -}}
{{- if .Values.selectorLabelsOverride -}}
{{- toYaml .Values.selectorLabelsOverride -}}
{{- else -}}
app.kubernetes.io/name: {{ include "drakit.name" . }}
app.kubernetes.io/component: kubelet-plugin
{{- if not .Values.plainManifests }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
{{- end -}}
{{- end }}

{{/* The pods' labels: the selector's (they must match it), then every object's labels and
the component, then podLabels. */}}
{{- define "drakit.podLabels" -}}
{{- $labels := merge (dict) (fromYaml (include "drakit.selector" .)) (fromYaml (include "drakit.labels" .)) (dict "app.kubernetes.io/component" "kubelet-plugin") (.Values.podLabels | default dict) -}}
{{- toYaml $labels -}}
{{- end }}

{{/* The namespace of every namespaced object: namespaceOverride, else the release's
(`helm install --namespace`). `default` only with allowDefaultNamespace: a node agent with
hostPath volumes and node-critical priority belongs in a namespace of its own. */}}
{{- define "drakit.namespace" -}}
{{- $ns := .Values.namespaceOverride | default .Release.Namespace -}}
{{- if and (eq $ns "default") (not .Values.allowDefaultNamespace) -}}
{{- fail "namespace: the chart would install into the `default` namespace; install with --namespace drakit --create-namespace (or set namespaceOverride), or set allowDefaultNamespace=true" -}}
{{- end -}}
{{- $ns -}}
{{- end }}

{{/* The discoverers, checked: at least one, names without commas. */}}
{{- define "drakit.discovery" -}}
{{- if not .Values.discovery.plugins -}}
{{- fail "discovery.plugins: choose the discoverers, e.g. --set discovery.plugins={pci} (pci, net, example or a vendor's plugin); there is no default" -}}
{{- end -}}
{{- join "," .Values.discovery.plugins -}}
{{- end }}

{{/* "true" when the pod runs in the host network namespace: hostNetwork, or (null) when
discovery.plugins has `net`, which reads the host's interfaces over netlink. */}}
{{- define "drakit.hostNetwork" -}}
{{- $net := has "net" .Values.discovery.plugins -}}
{{- if kindIs "invalid" .Values.hostNetwork -}}
{{- $net -}}
{{- else if and $net (not .Values.hostNetwork) -}}
{{- fail "hostNetwork: false, but discovery.plugins has `net`, which reads the host's network interfaces and needs the host network namespace; leave hostNetwork unset (null) or true" -}}
{{- else -}}
{{- .Values.hostNetwork -}}
{{- end -}}
{{- end }}

{{/* "true" when a maxSurge / maxUnavailable value is 0 or "0%". */}}
{{- define "drakit.isZero" -}}{{ has (toString .) (list "0" "0%") }}{{- end }}

{{/* The DaemonSet's updateStrategy (YAML), defaults filled in and checked. Unset (null)
values: both unset → maxSurge 1 / maxUnavailable 0 (0 / 1 in the host network); only
maxUnavailable set → maxSurge 1 if it is 0, else 0; only maxSurge set → maxUnavailable 1
if it is 0, else 0. */}}
{{- define "drakit.updateStrategy" -}}
{{- $s := .Values.updateStrategy -}}
{{- $host := eq (include "drakit.hostNetwork" .) "true" -}}
{{- if eq $s.type "OnDelete" -}}
type: OnDelete
{{- else -}}
{{- $ru := $s.rollingUpdate | default dict -}}
{{- $surge := $ru.maxSurge -}}
{{- $unavailable := $ru.maxUnavailable -}}
{{- if and (kindIs "invalid" $surge) (kindIs "invalid" $unavailable) -}}
{{- $surge = ternary 0 1 $host -}}
{{- $unavailable = ternary 1 0 $host -}}
{{- else if kindIs "invalid" $surge -}}
{{- $surge = ternary 1 0 (and (not $host) (eq (include "drakit.isZero" $unavailable) "true")) -}}
{{- else if kindIs "invalid" $unavailable -}}
{{- $unavailable = ternary 1 0 (eq (include "drakit.isZero" $surge) "true") -}}
{{- end -}}
{{- if and $host (ne (include "drakit.isZero" $surge) "true") -}}
{{- fail (printf "updateStrategy.rollingUpdate.maxSurge: %v, but the pod runs in the host network namespace, where two pods of a node would share the metrics port: use maxSurge 0 and maxUnavailable 1 or more" $surge) -}}
{{- end -}}
{{- if and (eq (include "drakit.isZero" $surge) "true") (eq (include "drakit.isZero" $unavailable) "true") -}}
{{- fail "updateStrategy.rollingUpdate: maxSurge and maxUnavailable are both 0; one must be more" -}}
{{- end -}}
type: RollingUpdate
rollingUpdate:
  maxSurge: {{ ternary ($surge | quote) $surge (kindIs "string" $surge) }}
  maxUnavailable: {{ ternary ($unavailable | quote) $unavailable (kindIs "string" $unavailable) }}
{{- end -}}
{{- end }}

{{/* The built-in discoverers that get a DeviceClass: those in discovery.plugins and
deviceClasses.discoverers. */}}
{{- define "drakit.deviceClassKinds" -}}
{{- $kinds := list -}}
{{- range (list "net" "pci" "example" "hostdev") -}}
{{- if or (has . $.Values.discovery.plugins) (has . $.Values.deviceClasses.discoverers) -}}
{{- $kinds = append $kinds . -}}
{{- end -}}
{{- end -}}
{{- join "," $kinds -}}
{{- end }}

{{- define "drakit.registrarDir" -}}{{ trimSuffix "/" .Values.kubeletRootDir }}/plugins_registry{{- end }}
{{- define "drakit.pluginsDir" -}}{{ trimSuffix "/" .Values.kubeletRootDir }}/plugins{{- end }}

{{- /* The hostdev rules of the values (discovery.config.hostdev.rules), or an empty list. */ -}}
{{- define "drakit.hostdevRules" -}}
{{- $config := .Values.discovery.config | default dict -}}
{{- $hostdev := get $config "hostdev" | default dict -}}
{{- toJson (get $hostdev "rules" | default list) -}}
{{- end }}

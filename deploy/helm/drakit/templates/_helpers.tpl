{{/* The agent's object names: <release>-kubelet-plugin etc. */}}
{{- define "drakit.agent" -}}{{ .Release.Name }}-kubelet-plugin{{- end }}

{{/* Labels of every object. */}}
{{- define "drakit.labels" -}}
app.kubernetes.io/name: drakit
{{- if not .Values.plainManifests }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}
{{- end }}

{{/* The DaemonSet's selector (immutable once installed). */}}
{{- define "drakit.selector" -}}
app.kubernetes.io/name: drakit
app.kubernetes.io/component: kubelet-plugin
{{- if not .Values.plainManifests }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
{{- end }}

{{/* The discoverers, checked: at least one, names without commas. */}}
{{- define "drakit.discovery" -}}
{{- if not .Values.discovery.plugins -}}
{{- fail "discovery.plugins: choose the discoverers, e.g. --set discovery.plugins={pci} (pci, net, example or a vendor's plugin); there is no default" -}}
{{- end -}}
{{- join "," .Values.discovery.plugins -}}
{{- end }}

{{- define "drakit.registrarDir" -}}{{ trimSuffix "/" .Values.kubeletRootDir }}/plugins_registry{{- end }}
{{- define "drakit.pluginsDir" -}}{{ trimSuffix "/" .Values.kubeletRootDir }}/plugins{{- end }}

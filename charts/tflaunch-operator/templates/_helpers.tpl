{{/* The objects' name (nameOverride; the ClusterRole and its binding are cluster-wide, so
     two releases need two names). */}}
{{- define "tflaunch-operator.name" -}}{{ .Values.nameOverride | default "tflaunch-operator" }}{{- end -}}

{{- define "tflaunch-operator.labels" -}}
app.kubernetes.io/name: tflaunch-operator
app.kubernetes.io/part-of: tflaunch
{{- end -}}

{{- define "tflaunch-operator.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The namespaces served when not all: `watch.namespaces`, or the release namespace. */}}
{{- define "tflaunch-operator.namespaces" -}}
{{- if .Values.watch.namespaces -}}
{{ join "," .Values.watch.namespaces }}
{{- else -}}
{{ .Release.Namespace }}
{{- end -}}
{{- end -}}

{{/* Exactly what the operator calls, and nothing else (tests/operator/test_manifests.py
     checks it against the calls it makes): no secrets, no CRDs, no namespaces, no kopf
     peering (leader election is a Lease in the operator's namespace: its own Role). */}}
{{- define "tflaunch-operator.rules" -}}
- apiGroups: [tflaunch.dev]
  resources: [multiworkerjobs]
  verbs: [get, list, watch, delete]  # delete: spec.ttlSecondsAfterFinished
- apiGroups: [tflaunch.dev]
  resources: [multiworkerjobs/status]
  verbs: [patch]
- apiGroups: [tflaunch.dev]
  resources: [multiworkerjobs/finalizers]
  verbs: [update]  # children's blockOwnerDeletion (OwnerReferencesPermissionEnforcement)
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch, create, patch, delete]  # patch: spec.suspend; get: on 409, whose?
- apiGroups: [""]
  resources: [pods]
  verbs: [list]
- apiGroups: [""]
  resources: [pods/log]
  verbs: [get]  # the chief's TFLAUNCH_RESULT line
- apiGroups: [""]
  resources: [services]
  verbs: [create, get, list, watch]  # get: on 409, whose is it? watch: restore a deleted one
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [create, get, list, watch]  # get: on 409, whose is it? watch: restore a deleted one
- apiGroups: [""]
  resources: [configmaps]
  verbs: [create, get]  # spec.script; get: on 409, whose is it?
- apiGroups: [""]
  resources: [events]
  verbs: [create, list]  # list: a Job's FailedCreate (e.g. a ResourceQuota refused its pods)
- apiGroups: [scheduling.volcano.sh, scheduling.x-k8s.io]
  resources: [podgroups]
  verbs: [get, create, patch]  # spec.gang: server-side apply; get: whose is it?
- apiGroups: [kueue.x-k8s.io]
  resources: [workloads]
  verbs: [list]  # spec.gang: kueue: why Kueue holds the Jobs back, in its words
{{- if .Values.tfjob.enabled }}
- apiGroups: [kubeflow.org]
  resources: [tfjobs]
  verbs: [get, list, watch]
- apiGroups: [kubeflow.org]
  resources: [tfjobs/status]
  verbs: [patch]  # the conditions and replicaStatuses a TFJob user reads
- apiGroups: [kubeflow.org]
  resources: [tfjobs/finalizers]
  verbs: [update]  # the MultiWorkerJob's blockOwnerDeletion
- apiGroups: [tflaunch.dev]
  resources: [multiworkerjobs]
  verbs: [create, patch]  # a TFJob's own MultiWorkerJob (server-side apply)
{{- end }}
{{- end -}}

{{/*
Which TFJobs the operator serves (tflaunch operator --tfjobs): "all" (runPolicy.managedBy
tflaunch.dev/operator or none) where the TFJob CRD is the chart's, "managed" (only the former)
where another installation (a training-operator) owns it. `helm template` looks nothing up:
the CRD is the chart's there.
*/}}
{{- define "tflaunch-operator.tfjobServe" -}}
{{- $crd := lookup "apiextensions.k8s.io/v1" "CustomResourceDefinition" "" "tfjobs.kubeflow.org" -}}
{{- $ours := or (not $crd) (eq (dig "metadata" "labels" "tflaunch.dev/crd-owner" "" $crd) "tflaunch") -}}
{{- if and .Values.tfjob.installCRD $ours -}}all{{- else -}}managed{{- end -}}
{{- end -}}

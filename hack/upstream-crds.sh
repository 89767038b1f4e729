#!/usr/bin/env bash
# The CRDs of the other projects tflaunch renders objects for (spec.gang's schedulers, the
# chart's ServiceMonitor), taken from their Go modules at test time; nothing of theirs is
# committed. Prints the directory that holds them (cached under
# ~/.cache/tflaunch/upstream-crds/<versions>/):
#
#   kueue/        sigs.k8s.io/kueue's config/components/crd/bases (LocalQueue, Workload, ...)
#   coscheduling/ sigs.k8s.io/scheduler-plugins' PodGroup (scheduling.x-k8s.io)
#   volcano/      Volcano's PodGroup and Queue (scheduling.volcano.sh), written by
#                 controller-gen from volcano.sh/apis' Go types, the way Volcano's own build
#                 writes them: the module that ships the YAML (volcano.sh/volcano) is not
#                 served by the module proxy here, volcano.sh/apis is.
#   prometheus/   the Prometheus Operator's ServiceMonitor (monitoring.coreos.com), written by
#                 controller-gen from its pkg/apis/monitoring module, as its build does.
#
#   hack/upstream-crds.sh    fetch (once) and print the directory
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KUEUE_VERSION=v0.17.0
VOLCANO_APIS_VERSION=v1.14.0
# The version Kueue v0.17.0 itself requires (its go.mod); the scheduler-plugins releases
# are not listed by the proxy, this exact one is served.
SCHEDULER_PLUGINS_VERSION=v0.34.1-devel
PROMETHEUS_APIS_VERSION=v0.95.2
CACHE_ROOT=${TFLAUNCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tflaunch}
OUT="$CACHE_ROOT/upstream-crds/kueue-$KUEUE_VERSION-volcano-apis-$VOLCANO_APIS_VERSION-scheduler-plugins-$SCHEDULER_PLUGINS_VERSION-prometheus-apis-$PROMETHEUS_APIS_VERSION-r1"

die() { printf 'upstream-crds: error: %s\n' "$*" >&2; exit 2; }

# module_dir MODULE@VERSION: where `go mod download` unpacked the module.
module_dir() {
  local json dir
  json=$(cd /tmp && GOFLAGS=-mod=mod go mod download -json "$1") || die "go mod download $1 failed: $json"
  dir=$(printf '%s' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -d "$dir" ] || die "go mod download $1 gave no directory: $json"
  printf '%s\n' "$dir"
}

if [ ! -d "$OUT" ]; then
  command -v go >/dev/null 2>&1 || die "Go is not installed (needed to fetch the modules)"
  controller_gen=$("$here/cluster.sh" controller-gen)
  [ -x "$controller_gen" ] || die "controller-gen is not built: run hack/cluster.sh build"
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/upstream-crds.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  mkdir -p "$tmp/kueue" "$tmp/coscheduling" "$tmp/volcano" "$tmp/prometheus"
  kueue=$(module_dir "sigs.k8s.io/kueue@$KUEUE_VERSION")
  cp "$kueue"/config/components/crd/bases/*.yaml "$tmp/kueue/"
  plugins=$(module_dir "sigs.k8s.io/scheduler-plugins@$SCHEDULER_PLUGINS_VERSION")
  cp "$plugins/config/crd/bases/scheduling.x-k8s.io_podgroups.yaml" "$tmp/coscheduling/"
  volcano=$(module_dir "volcano.sh/apis@$VOLCANO_APIS_VERSION")
  (cd "$volcano" && GOFLAGS=-mod=mod "$controller_gen" crd:crdVersions=v1 \
    paths=./pkg/apis/scheduling/v1beta1/... output:crd:artifacts:config="$tmp/volcano") >&2 ||
    die "controller-gen could not write Volcano's CRDs"
  prometheus=$(module_dir \
    "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring@$PROMETHEUS_APIS_VERSION")
  (cd "$prometheus" && GOFLAGS=-mod=mod "$controller_gen" crd:crdVersions=v1 \
    paths=./v1/... output:crd:artifacts:config="$tmp/prometheus") >&2 ||
    die "controller-gen could not write the Prometheus Operator's CRDs"
  find "$tmp/prometheus" -type f ! -name 'monitoring.coreos.com_servicemonitors.yaml' -delete
  chmod -R u+w "$tmp"
  mkdir -p "$(dirname "$OUT")"
  # Parallel test workers may build it at once: the first rename wins (rename onto a
  # non-empty directory fails), the others drop theirs instead of nesting it inside.
  mv "$tmp" "$OUT.tmp.$$"
  mv -T "$OUT.tmp.$$" "$OUT" 2>/dev/null || rm -rf "$OUT.tmp.$$"
  trap - EXIT
fi
printf '%s\n' "$OUT"

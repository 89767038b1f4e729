#!/usr/bin/env bash
# Kueue's manager (sigs.k8s.io/kueue, pinned with every dependency in hack/kueue/go.mod and
# go.sum), built once into the cache keyed by its version, and run against a test cluster.
#
#   hack/kueue.sh build             build the manager into the cache (slow only cold), with the
#                                   module's CRDs and webhook configurations beside it
#   hack/kueue.sh bin               print the path of the cached manager
#   hack/kueue.sh crds              print the module's CRD directory (config/components/crd/bases)
#   hack/kueue.sh up KUBECONFIG     run the cached manager against that cluster (hack/cluster.sh
#                                   up's) and create its queues; returns once its webhooks answer
#   hack/kueue.sh down KUBECONFIG   remove its webhook configurations and stop it
#
# `up` runs the manager as a host process, not in the cluster (kwok's nodes run no
# containers): its webhooks are served on https://127.0.0.1:PORT with a certificate signed by
# a CA made here (Kueue's internal certificate management is off), and its webhook
# configurations point at that url instead of a Service (hack/kueue_webhooks.py). Its CRDs are
# the module's. The queues, all named KUEUE_QUEUE (tflaunch):
#   a ResourceFlavor; a ClusterQueue for every namespace with the quota KUEUE_CPU (80),
#   KUEUE_MEMORY (320Gi) and KUEUE_GPUS (8: the kwok nodes' nvidia.com/gpu); a LocalQueue in
#   namespace KUEUE_NAMESPACE (default). An admitted job whose pods are not all ready within
#   KUEUE_PODS_READY_TIMEOUT (5m) is evicted and requeued (Kueue's waitForPodsReady).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=hack/lib.sh
source "$here/lib.sh"

KUEUE_VERSION=$(version sigs.k8s.io/kueue "$here/kueue/go.mod")
# Bump RECIPE when the way the manager is built changes, so caches rebuild.
RECIPE=1
KUEUE_DIR="$CACHE_ROOT/kueue/$KUEUE_VERSION-r$RECIPE"
QUEUE=${KUEUE_QUEUE:-tflaunch}

log() { printf 'kueue: %s\n' "$*" >&2; }
die() { printf 'kueue: error: %s\n' "$*" >&2; exit 2; }

# One build at a time per cache (the lock hack/cluster.sh takes too): a second caller waits
# for the first build instead of compiling beside it.
cmd_build() {
  [ -x "$KUEUE_DIR/kueue" ] && [ -e "$KUEUE_DIR/manifests/webhooks.yaml" ] &&
    { log "manager cached in $KUEUE_DIR"; return 0; }
  command -v go >/dev/null 2>&1 || die "Go is not installed; Kueue is built from its Go module (Go >= 1.26 needed)"
  mkdir -p "$KUEUE_DIR"
  exec 8>>"$CACHE_ROOT/build.lock"
  flock -w 3600 8 || die "waited an hour for $CACHE_ROOT/build.lock (another build running?)"
  if [ ! -x "$KUEUE_DIR/kueue" ]; then
    local start tmp="$KUEUE_DIR/.kueue.$$.tmp"
    start=$(date +%s)
    log "building the manager from sigs.k8s.io/kueue $KUEUE_VERSION (cold builds take minutes)"
    (cd "$here/kueue" && go build -trimpath -ldflags="-s -w" -o "$tmp" sigs.k8s.io/kueue/cmd/kueue)
    mv "$tmp" "$KUEUE_DIR/kueue"
    log "built in $(($(date +%s) - start)) s into $KUEUE_DIR"
  fi
  copy_manifests
  exec 8>&-
}

# The module's CRDs and webhook configurations beside the manager, so that `up` needs
# neither Go nor the module cache.
copy_manifests() {
  [ -e "$KUEUE_DIR/manifests/webhooks.yaml" ] && return 0
  local dir tmp="$KUEUE_DIR/.manifests.$$.tmp"
  dir=$(cd "$here/kueue" && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)
  mkdir -p "$tmp/crds"
  cp "$dir"/config/components/crd/bases/*.yaml "$tmp/crds/"
  cp "$dir/config/components/webhook/manifests.yaml" "$tmp/webhooks.yaml"
  rm -rf "$KUEUE_DIR/manifests"
  mv "$tmp" "$KUEUE_DIR/manifests"
}

cmd_crds() {
  local dir
  dir=$(cd "$here/kueue" && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)
  printf '%s/config/components/crd/bases\n' "$dir"
}

state_file() { printf '%s.kueue' "$(realpath -m "$1")"; }

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# certificates DIR: a CA, and the manager's serving certificate for 127.0.0.1 signed by it
# (tls.crt and tls.key: the names controller-runtime's webhook server reads).
certificates() {
  local dir=$1
  openssl req -x509 -newkey rsa:2048 -nodes -days 7 -subj "/CN=tflaunch-kueue-ca" \
    -keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
    -keyout "$dir/tls.key" -out "$dir/tls.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$dir/san.ext"
  openssl x509 -req -in "$dir/tls.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
    -CAcreateserial -days 7 -extfile "$dir/san.ext" -out "$dir/tls.crt" 2>/dev/null
}

# Without internal certificate management the manager reads its metrics server's certificate
# from this fixed path and exits if it is absent, even with metrics off (cmd/kueue/main.go):
# one made here, never served.
METRICS_CERTS=/etc/kueue/metrics/certs
metrics_certificate() {
  [ -e "$METRICS_CERTS/tls.crt" ] && [ -e "$METRICS_CERTS/tls.key" ] && return 0
  mkdir -p "$METRICS_CERTS" 2>/dev/null ||
    die "cannot create $METRICS_CERTS, where the manager reads its metrics certificate (run as root, or create it)"
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=kueue-metrics-unused" \
    -keyout "$METRICS_CERTS/tls.key" -out "$METRICS_CERTS/tls.crt" 2>/dev/null
}

# configuration WORKDIR WEBHOOK_PORT HEALTH_PORT: the manager's Configuration. It listens on
# 127.0.0.1 only, at ports of its own (several clusters may run at once); metrics and the
# visibility server are off; no leader election (one manager).
configuration() {
  cat <<EOF
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
health:
  healthProbeBindAddress: 127.0.0.1:$3
metrics:
  bindAddress: "0"
webhook:
  host: 127.0.0.1
  port: $2
  certDir: $1/certs
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
# An admitted gang whose pods are not all ready in time is evicted and requeued.
waitForPodsReady:
  timeout: ${KUEUE_PODS_READY_TIMEOUT:-5m}
  blockAdmission: false
integrations:
  frameworks: [batch/job]
featureGates:
  VisibilityOnDemand: false
EOF
}

queues() {
  cat <<EOF
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: $QUEUE}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: $QUEUE}
spec:
  namespaceSelector: {}
  preemption:
    withinClusterQueue: LowerPriority
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: $QUEUE
      resources:
      - {name: cpu, nominalQuota: "${KUEUE_CPU:-80}"}
      - {name: memory, nominalQuota: "${KUEUE_MEMORY:-320Gi}"}
      - {name: nvidia.com/gpu, nominalQuota: "${KUEUE_GPUS:-8}"}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: $QUEUE, namespace: ${KUEUE_NAMESPACE:-default}}
spec:
  clusterQueue: $QUEUE
EOF
}

# until_ok SECONDS COMMAND...: run COMMAND every half second until it succeeds (0); stop
# early when it exits 3 (no use trying again).
until_ok() {
  local seconds=$1 code
  shift
  for _ in $(seq $((seconds * 2))); do
    code=0
    "$@" >/dev/null 2>&1 || code=$?
    [ "$code" -eq 0 ] && return 0
    [ "$code" -eq 3 ] && return 1
    sleep 0.5
  done
  return 1
}

cmd_up() {
  local kubeconfig=$1 workdir webhook health start
  kubeconfig=$(realpath -m "$kubeconfig")
  [ -e "$kubeconfig" ] ||
    die "no kubeconfig at $kubeconfig: start the cluster first (hack/cluster.sh up $kubeconfig)"
  [ -e "$(state_file "$kubeconfig")" ] &&
    die "Kueue is already up for $kubeconfig; run: hack/kueue.sh down $kubeconfig"
  cmd_build
  start=$(date +%s%N)
  KUBECTL=$("$here/cluster.sh" bin)/kubectl
  KUBECONFIG_FILE=$kubeconfig
  workdir=$(mktemp -d "${TMPDIR:-/tmp}/tflaunch-kueue.XXXXXX")
  printf '%s\n' "$workdir" >"$(state_file "$kubeconfig")"
  # Whatever fails from here on, nothing is left behind (fail_up says why first).
  trap 'cmd_down "$KUBECONFIG_FILE" >/dev/null 2>&1' EXIT
  mkdir -p "$workdir/certs"
  certificates "$workdir/certs"
  metrics_certificate
  webhook=$(free_port)
  health=$(free_port)
  configuration "$workdir" "$webhook" "$health" >"$workdir/config.yaml"

  k apply --server-side --force-conflicts -f "$KUEUE_DIR/manifests/crds" >/dev/null
  k wait --for=condition=Established crd --all --timeout=60s >/dev/null
  k create namespace kueue-system --dry-run=client -o yaml | k apply -f - >/dev/null
  (
    cd "$workdir"
    KUBECONFIG=$kubeconfig setsid "$KUEUE_DIR/kueue" --config "$workdir/config.yaml" \
      </dev/null >"$workdir/kueue.log" 2>&1 &
    echo $! >"$workdir/kueue.pid"
  )
  until_ok 120 ready "$workdir" "$health" ||
    fail_up "$kubeconfig" "the manager did not become ready in 120 s (or exited)"
  k create --dry-run=client -o json -f "$KUEUE_DIR/manifests/webhooks.yaml" |
    python3 "$here/kueue_webhooks.py" "$webhook" "$workdir/certs/ca.crt" >"$workdir/webhooks.json"
  k apply -f "$workdir/webhooks.json" >/dev/null
  # Through the API server and the webhooks: this succeeds once they answer.
  queues >"$workdir/queues.yaml"
  until_ok 60 k apply -f "$workdir/queues.yaml" ||
    fail_up "$kubeconfig" "the queues could not be applied through Kueue's webhooks in 60 s"
  until_ok 60 k wait --for=condition=Active "clusterqueue/$QUEUE" --timeout=5s ||
    fail_up "$kubeconfig" "ClusterQueue $QUEUE did not become Active"
  trap - EXIT
  log "up in $((($(date +%s%N) - start) / 1000000)) ms: webhooks on https://127.0.0.1:$webhook, log in $workdir/kueue.log"
  log "submit with spec.gang: kueue and spec.queueName: $QUEUE (the LocalQueue in namespace ${KUEUE_NAMESPACE:-default})"
}

# ready WORKDIR HEALTH_PORT: whether the manager answers ready (3: it has exited).
ready() {
  kill -0 "$(cat "$1/kueue.pid")" 2>/dev/null || return 3
  curl -fsS "http://127.0.0.1:$2/readyz"
}

k() { "$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" "$@"; }

# fail_up KUBECONFIG WHY: the manager's last log lines, everything `up` did undone, exit 2.
fail_up() {
  local workdir
  workdir=$(cat "$(state_file "$1")")
  tail -n 30 "$workdir/kueue.log" >&2 || true
  cmd_down "$1"
  die "$2 (the manager's last log lines are above)"
}

cmd_down() {
  local kubeconfig=$1 state workdir pid
  kubeconfig=$(realpath -m "$kubeconfig")
  state=$(state_file "$kubeconfig")
  if [ ! -e "$state" ]; then
    log "Kueue is not up for $kubeconfig"
    return 0
  fi
  workdir=$(cat "$state")
  KUBECTL=$("$here/cluster.sh" bin)/kubectl
  KUBECONFIG_FILE=$kubeconfig
  # The webhooks first: with the manager gone they would refuse every Job (failurePolicy Fail).
  if [ -e "$kubeconfig" ]; then
    k delete --ignore-not-found --timeout=30s \
      mutatingwebhookconfiguration/kueue-mutating-webhook-configuration \
      validatingwebhookconfiguration/kueue-validating-webhook-configuration >/dev/null 2>&1 || true
  fi
  pid=$(cat "$workdir/kueue.pid" 2>/dev/null || true)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -rf "$workdir" "$state"
  log "down"
}

case ${1:-} in
  build) cmd_build ;;
  bin) printf '%s\n' "$KUEUE_DIR/kueue" ;;
  crds) cmd_crds ;;
  up | down)
    [ -n "${2:-}" ] || die "usage: hack/kueue.sh $1 KUBECONFIG"
    "cmd_$1" "$2" ;;
  *) die "usage: hack/kueue.sh build | bin | crds | up KUBECONFIG | down KUBECONFIG" ;;
esac

#!/usr/bin/env bash
# A real Kubernetes control plane on 127.0.0.1 for the e2e tests and for trying tflaunch:
# kube-apiserver, kube-controller-manager, kube-scheduler, etcd and kwok, built from their Go
# modules (hack/k8s, hack/etcd, hack/kwok pin every version in go.mod/go.sum) and started by
# kwok's own `kwokctl create cluster --runtime binary`, which owns certificates, flags,
# kubeconfig, start and stop. kwok runs no containers: pods move through the Stages in
# hack/kwok/stages.yaml.
#
#   hack/cluster.sh build               build the binaries once into the cache (slow only cold)
#   hack/cluster.sh up [KUBECONFIG]     start a cluster; admin kubeconfig (default .cluster/kubeconfig)
#   hack/cluster.sh down [KUBECONFIG]   stop every process of that cluster and remove its state
#   hack/cluster.sh apiserver-stop|apiserver-start KUBECONFIG
#                                       stop / start again that cluster's kube-apiserver
#   hack/cluster.sh bin                 print the directory of the cached binaries
#   hack/cluster.sh port-lock           print the lock file held while a cluster takes its ports
#   hack/cluster.sh helm                print the path of the cached helm (built by `build` too)
#   hack/cluster.sh controller-gen      print the path of the cached controller-gen (idem)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
# shellcheck source=hack/lib.sh
source "$here/lib.sh"

K8S_VERSION=$(version k8s.io/kubernetes "$here/k8s/go.mod")
ETCD_VERSION=$(version go.etcd.io/etcd/server/v3 "$here/etcd/go.mod")
KWOK_VERSION=$(version sigs.k8s.io/kwok "$here/kwok/go.mod")
HELM_VERSION=$(version helm.sh/helm/v3 "$here/helm/go.mod")
CONTROLLER_GEN_VERSION=$(version sigs.k8s.io/controller-tools "$here/controller-gen/go.mod")
# Bump RECIPE when the way the binaries are built changes, so caches rebuild.
RECIPE=2
BIN_DIR="$CACHE_ROOT/control-plane/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION-r$RECIPE"
# helm (for the chart tests, hack/helm) and controller-gen (for Volcano's CRD in the gang
# tests, hack/controller-gen) are cached apart: their versions move on their own.
HELM_DIR="$CACHE_ROOT/helm/helm-$HELM_VERSION-r2"
CONTROLLER_GEN_DIR="$CACHE_ROOT/controller-gen/controller-gen-$CONTROLLER_GEN_VERSION-r1"
BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kwok kwokctl)
CLUSTER_NAME=${TFLAUNCH_CLUSTER_NAME:-tflaunch}

log() { printf 'cluster: %s\n' "$*" >&2; }
die() { printf 'cluster: error: %s\n' "$*" >&2; exit 2; }

need_go() {
  command -v go >/dev/null 2>&1 ||
    die "Go is not installed; the control plane is built from Go modules (Go >= 1.26 needed)"
}

# The version stamps Kubernetes' own build sets (hack/lib/version.sh there): without them the
# binaries report v0.0.0-master, which kubectl and version-skew checks reject.
k8s_ldflags() {
  local minor=${K8S_VERSION#v1.}
  minor=${minor%%.*}
  local pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    printf -- '-X %s.gitVersion=%s -X %s.gitMajor=1 -X %s.gitMinor=%s -X %s.gitTreeState=clean ' \
      "$pkg" "$K8S_VERSION" "$pkg" "$pkg" "$minor" "$pkg"
  done
}

# go_build MODULE_DIR OUT PACKAGE [LDFLAGS] [DEST]: build one command of a tool module into
# the cache (DEST defaults to the control plane's directory).
go_build() {
  local dir=$1 out=$2 pkg=$3 ldflags=${4:-} dest=${5:-$BIN_DIR}
  log "building $out from $pkg (cold builds take minutes)"
  # A name of its own per build, so two builds of one binary never move each other's file.
  local tmp="$dest/.$out.$$.tmp"
  (cd "$dir" && go build -trimpath -ldflags="-s -w $ldflags" -o "$tmp" "$pkg")
  mv "$tmp" "$dest/$out"
}

# helm's version stamps, as its own Makefile sets them: its version, and the Kubernetes
# version `helm template` and `helm lint` assume (client-go's; else v1.20).
build_helm() {
  [ -x "$HELM_DIR/helm" ] && return 0
  need_go
  mkdir -p "$HELM_DIR"
  local client_go minor pkg flags
  client_go=$(version k8s.io/client-go "$here/helm/go.mod")
  minor=${client_go#v0.}
  minor=${minor%%.*}
  flags="-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    flags="$flags -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$minor"
  done
  go_build "$here/helm" helm helm.sh/helm/v3/cmd/helm "$flags" "$HELM_DIR"
}

build_controller_gen() {
  [ -x "$CONTROLLER_GEN_DIR/controller-gen" ] && return 0
  need_go
  mkdir -p "$CONTROLLER_GEN_DIR"
  go_build "$here/controller-gen" controller-gen sigs.k8s.io/controller-tools/cmd/controller-gen "" \
    "$CONTROLLER_GEN_DIR"
}

# One build at a time per cache: parallel test workers (and several checkouts) that all find
# a binary missing wait for the first build instead of compiling it again beside it. The lock
# is released before anything long-lived starts, so no daemon inherits it.
cmd_build() {
  mkdir -p "$CACHE_ROOT"
  exec 8>>"$CACHE_ROOT/build.lock"
  flock -w 3600 8 || die "waited an hour for $CACHE_ROOT/build.lock (another build running?)"
  build_locked
  exec 8>&-
}

build_locked() {
  local missing=() b start
  build_helm
  build_controller_gen
  for b in "${BINARIES[@]}"; do
    [ -x "$BIN_DIR/$b" ] || missing+=("$b")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    log "binaries cached in $BIN_DIR"
    return 0
  fi
  need_go
  mkdir -p "$BIN_DIR"
  start=$(date +%s)
  for b in "${missing[@]}"; do
    case $b in
      kube-apiserver | kube-controller-manager | kube-scheduler | kubectl)
        go_build "$here/k8s" "$b" "k8s.io/kubernetes/cmd/$b" "$(k8s_ldflags)" ;;
      etcd) go_build "$here/etcd" etcd go.etcd.io/etcd/server/v3 ;;
      kwok | kwokctl) go_build "$here/kwok" "$b" "sigs.k8s.io/kwok/cmd/$b" ;;
    esac
  done
  log "built ${missing[*]} in $(($(date +%s) - start)) s into $BIN_DIR"
}

state_file() { printf '%s.state' "$1"; }

# kwokctl picks "free" ports by probing downwards from 32767, so two clusters created at the
# same time (parallel test workers, other users of this cache) would pick the same ones.
# Creating a cluster, and the window in which a stopped kube-apiserver leaves its port
# free (tests/e2e's ControlPlane.stop_apiserver), hold this lock.
PORT_LOCK="$CACHE_ROOT/ports.lock"

cmd_up() {
  local kubeconfig=${1:-$root/.cluster/kubeconfig} workdir start pki
  kubeconfig=$(realpath -m "$kubeconfig")
  cmd_build
  [ -e "$(state_file "$kubeconfig")" ] &&
    die "a cluster is already up for $kubeconfig; run: hack/cluster.sh down $kubeconfig"
  mkdir -p "$(dirname "$kubeconfig")"
  workdir=$(mktemp -d "${TMPDIR:-/tmp}/tflaunch-cluster.XXXXXX")
  printf '%s\n' "$workdir" >"$(state_file "$kubeconfig")"
  rm -f "$kubeconfig"
  start=$(date +%s%N)
  mkdir -p "$CACHE_ROOT"
  exec 9>>"$PORT_LOCK"
  flock -w 600 9 || die "waited 600 s for $PORT_LOCK (another cluster being created?)"
  # kwokctl reads KWOK_* variables; everything it writes stays under the work directory.
  # A real kubelet (hack/node.sh) may join: it is authorized as a node (kwokctl sets
  # --authorization-mode=Node,RBAC; NodeRestriction is not on by default, so it is added); the
  # API server reaches it at its InternalIP (kwok's nodes have only a Hostname, localhost) and
  # shows it kwokctl's admin certificate for logs and exec; it listens on every address (later
  # flags win over kwokctl's loopback), so the real node's pods reach it at its advertised
  # address through the kubernetes Service (hack/node.sh runs kube-proxy); kwok manages only its own nodes
  # (those of hack/kwok/nodes.yaml, annotated kwok.x-k8s.io/node=fake), not every node.
  # kwokctl v0.8.0 files a component's later --extra-args under the position of its first one
  # among all the flags: each component's first flag must come in the first four, in order.
  pki="$workdir/clusters/$CLUSTER_NAME/pki"
  # One controller-manager and one scheduler, and nothing here restarts a process that exits:
  # without leader election they ride out an API-server restart instead of exiting when they
  # cannot renew their lease (what a kubelet would restart them from on a real node).
  KWOK_WORKDIR=$workdir KWOK_KUBE_VERSION=$K8S_VERSION KWOK_KUBECTL_BINARY=$BIN_DIR/kubectl \
    "$BIN_DIR/kwokctl" create cluster --name "$CLUSTER_NAME" --runtime binary \
    --kube-authorization --kube-admission \
    --kube-apiserver-binary "$BIN_DIR/kube-apiserver" \
    --kube-controller-manager-binary "$BIN_DIR/kube-controller-manager" \
    --kube-scheduler-binary "$BIN_DIR/kube-scheduler" \
    --kwok-controller-binary "$BIN_DIR/kwok" \
    --etcd-binary "$BIN_DIR/etcd" \
    --config "$here/kwok/stages.yaml" --enable-crds Logs,ClusterLogs,ClusterPortForward \
    --extra-args kube-controller-manager=leader-elect=false \
    --extra-args kube-scheduler=leader-elect=false \
    --extra-args kwok-controller=manage-all-nodes=false \
    --extra-args kube-apiserver=enable-admission-plugins=NodeRestriction \
    --extra-args kwok-controller=manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
    --extra-args "kube-apiserver=kubelet-client-certificate=$pki/admin.crt" \
    --extra-args "kube-apiserver=kubelet-client-key=$pki/admin.key" \
    --extra-args kube-apiserver=kubelet-preferred-address-types=InternalIP,Hostname \
    --extra-args kube-apiserver=bind-address=0.0.0.0 \
    --kubeconfig "$kubeconfig" --quiet-pull --wait 2m >"$workdir/create.log" 2>&1 9>&- ||
    { cat "$workdir/create.log" >&2; cmd_down "$kubeconfig"; die "kwokctl could not start the cluster"; }
  "$BIN_DIR/kubectl" --kubeconfig "$kubeconfig" apply -f "$here/kwok/nodes.yaml" >/dev/null
  "$BIN_DIR/kubectl" --kubeconfig "$kubeconfig" wait --for=condition=Ready node --all --timeout=60s >/dev/null
  flock -u 9 && exec 9>&-  # every component listens now: its ports show as used
  log "up in $((($(date +%s%N) - start) / 1000000)) ms: $("$BIN_DIR/kubectl" --kubeconfig "$kubeconfig" config view --minify -o jsonpath='{.clusters[0].cluster.server}')"
  # The matching kubectl beside the kubeconfig, for machines that have none.
  mkdir -p "$(dirname "$kubeconfig")/bin"
  ln -sf "$BIN_DIR/kubectl" "$(dirname "$kubeconfig")/bin/kubectl"
  cat >&2 <<EOF
cluster: try it:
  export KUBECONFIG=$kubeconfig PATH=$(dirname "$kubeconfig")/bin:\$PATH
  kubectl get nodes
cluster: stop it with: make cluster-down (or hack/cluster.sh down $kubeconfig)
EOF
}

cmd_down() {
  local kubeconfig=${1:-$root/.cluster/kubeconfig} state workdir
  kubeconfig=$(realpath -m "$kubeconfig")
  state=$(state_file "$kubeconfig")
  if [ ! -e "$state" ]; then
    log "no cluster is up for $kubeconfig"
    return 0
  fi
  workdir=$(cat "$state")
  if [ -d "$workdir" ]; then
    KWOK_WORKDIR=$workdir "$BIN_DIR/kwokctl" delete cluster --name "$CLUSTER_NAME" \
      --kubeconfig "$kubeconfig" >/dev/null 2>&1 || true
    stop_leftovers "$workdir"
    rm -rf "$workdir"
  fi
  rm -f "$state" "$kubeconfig" "$(dirname "$kubeconfig")/bin/kubectl"
  log "down"
}

# stop_leftovers WORKDIR: stop every process still running a binary from WORKDIR (kwokctl
# stops what it started, but not a process restarted by apiserver-start, nor one left by a
# crashed or interrupted run), and wait until they are gone.
stop_leftovers() {
  local pattern="$1/clusters/"
  pkill -f "$pattern" 2>/dev/null || true
  for _ in $(seq 50); do pgrep -f "$pattern" >/dev/null || return 0; sleep 0.1; done
  pkill -9 -f "$pattern" 2>/dev/null || true
}

# apiserver_stop / apiserver_start KUBECONFIG: what a control-plane upgrade looks like to a
# client: the kube-apiserver process gone, then back with the same flags and the same etcd.
# kwokctl stops and starts only whole clusters (and a restarted kwok controller waits out
# its predecessor's node leases), so this one process is handled by pid here.
component_dir() {
  local kubeconfig state
  kubeconfig=$(realpath -m "$1")
  state=$(state_file "$kubeconfig")
  [ -e "$state" ] || die "no cluster is up for $kubeconfig"
  printf '%s/clusters/%s' "$(cat "$state")" "$CLUSTER_NAME"
}

apiserver_stop() {
  local dir pid
  dir=$(component_dir "$1")
  pid=$(cat "$dir/pids/kube-apiserver.pid")
  tr '\0' '\n' <"/proc/$pid/cmdline" >"$dir/kube-apiserver.cmdline"
  kill "$pid"  # a graceful stop first, as an upgrade would; it may hold watches for a while
  for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
}

apiserver_start() {
  local dir args
  dir=$(component_dir "$1")
  mapfile -t args <"$dir/kube-apiserver.cmdline"
  (
    cd "$dir" || exit 1
    setsid "${args[@]}" </dev/null >>"$dir/logs/kube-apiserver.log" 2>&1 &
    echo $! >"$dir/pids/kube-apiserver.pid"
  )
  for _ in $(seq 300); do
    "$BIN_DIR/kubectl" --kubeconfig "$1" get --raw /readyz >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  die "kube-apiserver did not become ready again"
}

case ${1:-} in
  build) cmd_build ;;
  up) cmd_up "${2:-}" ;;
  down) cmd_down "${2:-}" ;;
  apiserver-stop | apiserver-start)
    [ -n "${2:-}" ] || die "usage: hack/cluster.sh $1 KUBECONFIG"
    "${1/-/_}" "$2" ;;
  bin) printf '%s\n' "$BIN_DIR" ;;
  port-lock) printf '%s\n' "$PORT_LOCK" ;;
  helm) printf '%s\n' "$HELM_DIR/helm" ;;
  controller-gen) printf '%s\n' "$CONTROLLER_GEN_DIR/controller-gen" ;;
  *) die "usage: hack/cluster.sh build | up [KUBECONFIG] | down [KUBECONFIG] | apiserver-stop|apiserver-start KUBECONFIG | bin | port-lock | helm | controller-gen" ;;
esac

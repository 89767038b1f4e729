#!/usr/bin/env bash
# A real node beside the kwok nodes of hack/cluster.sh's control plane: a kubelet and
# kube-proxy (the same k8s.io/kubernetes pin as the control plane, hack/k8s; kube-proxy in
# iptables mode, so pods reach Services' ClusterIPs, the API server's too), containerd 2.x with its runc shim
# (hack/containerd; runc itself from Debian), the CNI plugins bridge, host-local, loopback and
# portmap (hack/cni), kube-router's network policy controller enforcing NetworkPolicy with
# iptables and ipsets (hack/kube-router), CoreDNS as a process on this host serving cluster.local from the API
# server (hack/coredns), crictl (hack/crictl), and a pause image built here (hack/pause).
# Every version is pinned by those go.mod/go.sum files; the binaries are cached by version.
#
#   hack/node.sh build               build the binaries once into the cache (slow only cold)
#   hack/node.sh up [KUBECONFIG]     join a node to the cluster of that admin kubeconfig
#                                    (default .cluster/kubeconfig, from `make cluster-up`)
#   hack/node.sh down                stop the node, unmount and remove everything it made
#   hack/node.sh import ARCHIVE      import an OCI/Docker image archive into its containerd
#   hack/node.sh crictl ARG...       crictl against its containerd (ps, logs, stop, ...)
#   hack/node.sh kill|revive NAME    SIGKILL containerd, coredns or the kubelet / start it again
#   hack/node.sh smoke-image         print the path of the smoke-test image archive (busybox)
#   hack/node.sh bin | state         print the directory of the binaries / of the node's state
#
# One node per machine (a fixed bridge, port 53 on its gateway, one containerd): `up` refuses
# while one is up. It needs root, runc and iptables (apt-get install runc iptables
# busybox-static). The node is tainted tflaunch.dev/real-node=true:NoSchedule and labelled
# tflaunch.dev/real-node=true: only pods that tolerate the taint (and select the label) run
# on it, so the e2e suite's pods keep landing on the kwok nodes.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
# shellcheck source=hack/lib.sh
source "$here/lib.sh"

K8S_VERSION=$(version k8s.io/kubernetes "$here/k8s/go.mod")
CONTAINERD_VERSION=$(version github.com/containerd/containerd/v2 "$here/containerd/go.mod")
CNI_VERSION=$(version github.com/containernetworking/plugins "$here/cni/go.mod")
COREDNS_VERSION=$(version github.com/coredns/coredns "$here/coredns/go.mod")
CRICTL_VERSION=$(version sigs.k8s.io/cri-tools "$here/crictl/go.mod")
KUBE_ROUTER_VERSION=$(version github.com/cloudnativelabs/kube-router/v2 "$here/kube-router/go.mod")
# Bump RECIPE when the way the binaries or images are built changes, so caches rebuild.
RECIPE=2
BIN_DIR="$CACHE_ROOT/node/k8s-$K8S_VERSION-containerd-$CONTAINERD_VERSION-cni-$CNI_VERSION-coredns-$COREDNS_VERSION-crictl-$CRICTL_VERSION-kube-router-$KUBE_ROUTER_VERSION-r$RECIPE"
CNI_BINARIES=(bridge host-local loopback portmap)
BINARIES=(kubelet kube-proxy kube-router containerd ctr containerd-shim-runc-v2 crictl coredns pause "${CNI_BINARIES[@]/#/cni/}")

# The node's fixed names and addresses (one node per machine).
NODE_NAME=${TFLAUNCH_NODE_NAME:-tflaunch-real-0}
STATE=${TFLAUNCH_NODE_STATE:-/var/lib/tflaunch-node}
BRIDGE=tflaunch0
POD_CIDR=10.244.0.0/24
GATEWAY=10.244.0.1 # the bridge's address on the host; CoreDNS listens there (clusterDNS)
KUBELET_PORT=10350  # not 10250: kwok's own kubelet server may hold that
PROXY_PORT=10353    # kube-proxy's healthz; its metrics on the next port, kube-router's health next
SERVICE_CIDR=10.0.0.0/24 # kwokctl's --service-cluster-ip-range
PAUSE_IMAGE=tflaunch.dev/pause:1
SMOKE_IMAGE=tflaunch.dev/busybox:1
TAINT=tflaunch.dev/real-node
CONTROL_PLANE_BIN=$("$here/cluster.sh" bin)

log() { printf 'node: %s\n' "$*" >&2; }
die() { printf 'node: error: %s\n' "$*" >&2; exit 2; }

need_go() {
  command -v go >/dev/null 2>&1 ||
    die "Go is not installed; the node is built from Go modules (Go >= 1.26 needed)"
}

k8s_ldflags() {
  local minor=${K8S_VERSION#v1.} pkg
  minor=${minor%%.*}
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    printf -- '-X %s.gitVersion=%s -X %s.gitMajor=1 -X %s.gitMinor=%s -X %s.gitTreeState=clean ' \
      "$pkg" "$K8S_VERSION" "$pkg" "$pkg" "$minor" "$pkg"
  done
}

# go_build MODULE_DIR OUT PACKAGE [LDFLAGS]: one command of a tool module into the cache,
# static (CGO off: containerd's and the shim's optional cgo parts are not needed here).
go_build() {
  local dir=$1 out=$2 pkg=$3 ldflags=${4:-} start
  start=$(date +%s)
  mkdir -p "$(dirname "$BIN_DIR/$out")"
  (cd "$dir" && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w $ldflags" \
    -o "$BIN_DIR/$out.tmp" "$pkg")
  mv "$BIN_DIR/$out.tmp" "$BIN_DIR/$out"
  log "built $out in $(($(date +%s) - start)) s"
}

containerd_ldflags() {
  printf -- '-X github.com/containerd/containerd/v2/version.Version=%s' "$CONTAINERD_VERSION"
}

build_one() {
  case $1 in
    kubelet | kube-proxy) go_build "$here/k8s" "$1" "k8s.io/kubernetes/cmd/$1" "$(k8s_ldflags)" ;;
    containerd | ctr | containerd-shim-runc-v2)
      go_build "$here/containerd" "$1" "github.com/containerd/containerd/v2/cmd/$1" "$(containerd_ldflags)" ;;
    crictl)
      go_build "$here/crictl" crictl sigs.k8s.io/cri-tools/cmd/crictl \
        "-X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION" ;;
    coredns) go_build "$here/coredns" coredns github.com/coredns/coredns ;;
    pause) go_build "$here/pause" pause . ;;
    kube-router)
      go_build "$here/kube-router" kube-router github.com/cloudnativelabs/kube-router/v2/cmd/kube-router \
        "-X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=$KUBE_ROUTER_VERSION" ;;
    cni/*)
      local plugin=${1#cni/} kind=main
      case $plugin in host-local) kind=ipam ;; portmap) kind=meta ;; esac
      go_build "$here/cni" "$1" "github.com/containernetworking/plugins/plugins/$kind/$plugin" \
        "-X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$CNI_VERSION" ;;
  esac
}

cmd_build() {
  local missing=() b start
  for b in "${BINARIES[@]}"; do
    [ -x "$BIN_DIR/$b" ] || missing+=("$b")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    need_go
    start=$(date +%s)
    for b in "${missing[@]}"; do build_one "$b"; done
    log "built ${missing[*]} in $(($(date +%s) - start)) s into $BIN_DIR"
  fi
  build_images
  log "binaries cached in $BIN_DIR"
}

# The pause image (the pods' sandbox) from the pause binary; the smoke image from Debian's
# busybox-static (the real-node tests' containers: a shell, nslookup, nc).
build_images() {
  local rootfs
  if [ ! -e "$BIN_DIR/images/pause.tar" ]; then
    rootfs=$(mktemp -d)
    install -D -m 0755 "$BIN_DIR/pause" "$rootfs/pause"
    mkdir -p "$BIN_DIR/images"
    python3 "$here/oci-archive.py" "$rootfs" "$PAUSE_IMAGE" "$BIN_DIR/images/pause.tar" \
      --entrypoint /pause --user 65535:65535
    rm -rf "$rootfs"
  fi
}

smoke_image() {
  local busybox rootfs applet out="$BIN_DIR/images/busybox.tar"
  [ -e "$out" ] && { printf '%s\n' "$out"; return 0; }
  busybox=$(command -v busybox || true)
  [ -n "$busybox" ] || die "busybox not found: apt-get install busybox-static"
  ! ldd "$busybox" >/dev/null 2>&1 ||
    die "$busybox is linked dynamically (the image has no libc): apt-get install busybox-static"
  rootfs=$(mktemp -d)
  install -D -m 0755 "$busybox" "$rootfs/bin/busybox"
  for applet in sh echo cat sleep nslookup nc hostname ls true false id wget; do
    ln -s busybox "$rootfs/bin/$applet"
  done
  mkdir -p "$rootfs/tmp" "$rootfs/etc" "$BIN_DIR/images"
  chmod 1777 "$rootfs/tmp"
  python3 "$here/oci-archive.py" "$rootfs" "$SMOKE_IMAGE" "$out"
  rm -rf "$rootfs"
  printf '%s\n' "$out"
}

need_root() {
  [ "$(id -u)" = 0 ] || die "the node runs containers: run as root"
  command -v runc >/dev/null 2>&1 || die "runc not found: apt-get install runc iptables"
  command -v iptables >/dev/null 2>&1 || die "iptables not found: apt-get install iptables"
  command -v ipset >/dev/null 2>&1 || die "ipset not found: apt-get install ipset"
  command -v openssl >/dev/null 2>&1 || die "openssl not found: apt-get install openssl"
}

kubectl_admin() { "$CONTROL_PLANE_BIN/kubectl" --kubeconfig "$ADMIN_KUBECONFIG" "$@"; }

# start NAME COMMAND...: a daemon of the node, in its own session, logging to
# $STATE/logs/NAME.log; its pid in $STATE/pids/NAME.pid.
start() {
  local name=$1
  shift
  setsid "$@" </dev/null >>"$STATE/logs/$name.log" 2>&1 &
  echo $! >"$STATE/pids/$name.pid"
}

# wait_for WHAT SECONDS COMMAND...: until COMMAND succeeds; on a timeout, the logs and a die.
wait_for() {
  local what=$1 seconds=$2 i
  shift 2
  for i in $(seq $((seconds * 5))); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  tail -n 20 "$STATE"/logs/*.log >&2 || true
  cmd_down >/dev/null 2>&1 || true
  die "$what did not come up within $seconds s (logs above)"
}

# The kubelet's identity: a client certificate for system:node:NAME in group system:nodes,
# signed by the cluster's CA (kwokctl's pki/ca.key), so the Node authorizer and the
# NodeRestriction admission plugin treat it as they treat any kubelet.
node_credentials() {
  local pki=$1 server
  openssl req -new -newkey rsa:2048 -nodes -keyout "$STATE/pki/kubelet-client.key" \
    -subj "/O=system:nodes/CN=system:node:$NODE_NAME" -out "$STATE/pki/kubelet-client.csr" 2>/dev/null
  openssl x509 -req -in "$STATE/pki/kubelet-client.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
    -set_serial "0x$(openssl rand -hex 8)" -days 2 -out "$STATE/pki/kubelet-client.crt" 2>/dev/null
  cp "$pki/ca.crt" "$STATE/pki/ca.crt"
  # kube-proxy's own: user system:kube-proxy, whom the built-in ClusterRoleBinding
  # system:node-proxier lets watch Services, EndpointSlices and Nodes.
  openssl req -new -newkey rsa:2048 -nodes -keyout "$STATE/pki/kube-proxy.key" \
    -subj "/CN=system:kube-proxy" -out "$STATE/pki/kube-proxy.csr" 2>/dev/null
  openssl x509 -req -in "$STATE/pki/kube-proxy.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
    -set_serial "0x$(openssl rand -hex 8)" -days 2 -out "$STATE/pki/kube-proxy.crt" 2>/dev/null
  server=$(kubectl_admin config view --minify -o jsonpath='{.clusters[0].cluster.server}')
  client_kubeconfig "$server" kubelet-client >"$STATE/kubelet.kubeconfig"
  client_kubeconfig "$server" kube-proxy >"$STATE/kube-proxy.kubeconfig"
  # kube-router's: user system:kube-router, bound to the read-only ClusterRole of
  # network_policies below.
  openssl req -new -newkey rsa:2048 -nodes -keyout "$STATE/pki/kube-router.key" \
    -subj "/CN=system:kube-router" -out "$STATE/pki/kube-router.csr" 2>/dev/null
  openssl x509 -req -in "$STATE/pki/kube-router.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
    -set_serial "0x$(openssl rand -hex 8)" -days 2 -out "$STATE/pki/kube-router.crt" 2>/dev/null
  client_kubeconfig "$server" kube-router >"$STATE/kube-router.kubeconfig"
}

# client_kubeconfig SERVER NAME: a kubeconfig for the certificate $STATE/pki/NAME.{crt,key}.
client_kubeconfig() {
  cat <<EOF
apiVersion: v1
kind: Config
clusters:
- name: cluster
  cluster: {server: "$1", certificate-authority: "$STATE/pki/ca.crt"}
users:
- name: node
  user: {client-certificate: "$STATE/pki/$2.crt", client-key: "$STATE/pki/$2.key"}
contexts:
- name: node
  context: {cluster: cluster, user: node}
current-context: node
EOF
}

write_configs() {
  cat >"$STATE/containerd.toml" <<EOF
version = 3
root = "$STATE/containerd/root"
state = "$STATE/containerd/state"

[grpc]
  address = "$STATE/containerd.sock"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "$PAUSE_IMAGE"
  # Registry hosts as an air-gapped cluster configures them: HOST/hosts.toml files (mirrors),
  # read at each pull. None by default; a test that serves images from a local registry
  # writes one for the registry it mirrors (tests/node/registry.py).
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = "$STATE/certs.d"

[plugins.'io.containerd.cri.v1.runtime']
  # The kubelet asks for a negative oom_score_adj for sandboxes (-998) and Guaranteed pods;
  # lowering it needs CAP_SYS_RESOURCE, which this machine's root does not have (runc then
  # fails with "can't get final child's PID from pipe"). Clamp to containerd's own instead.
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = "$(command -v runc)"
      SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["$BIN_DIR/cni"]
    conf_dir = "$STATE/cni/net.d"
EOF
  # One bridge on the host; host-local hands out the pod addresses, and a default route via
  # the gateway (Services' ClusterIPs are not on the bridge: kube-proxy DNATs them on the
  # host). No masquerading (the pods talk to each other, to CoreDNS on the gateway and to the
  # API server, nothing outside this machine).
  cat >"$STATE/cni/net.d/10-tflaunch.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "tflaunch",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$GATEWAY"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$STATE/cni/ipam"
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  # CoreDNS as a host process (no registry to pull its image from): cluster.local from the
  # API server's Services and EndpointSlices, so a headless Service's pods resolve by
  # HOSTNAME.SUBDOMAIN.NAMESPACE.svc.cluster.local. Nothing is forwarded (no upstream here).
  cat >"$STATE/Corefile" <<EOF
.:53 {
    bind $GATEWAY
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $ADMIN_KUBECONFIG
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
}
EOF
  cat >"$STATE/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine's cgroups are v1 (hybrid). Kubernetes >= 1.35 refuses to start a kubelet on
# cgroup v1 unless this is false: the node runs here only because of this line.
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$STATE/containerd.sock
clusterDNS: [$GATEWAY]
clusterDomain: cluster.local
podCIDR: $POD_CIDR
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $((KUBELET_PORT - 2))
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $STATE/pki/ca.crt}
authorization: {mode: Webhook}
failSwapOn: false
registerWithTaints:
- {key: $TAINT, value: "true", effect: NoSchedule}
# A shared test machine: evict only when it is really out of room.
evictionHard: {memory.available: 100Mi, nodefs.available: 2%, imagefs.available: 2%, nodefs.inodesFree: 2%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
EOF
  # kube-proxy in iptables mode (Debian's iptables): Services' ClusterIPs DNATed to their
  # endpoints. It leaves this machine's sysctls alone (no conntrack table sizing, no
  # route_localnet for NodePorts on 127.0.0.1) and listens on loopback only.
  cat >"$STATE/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $STATE/kube-proxy.kubeconfig}
hostnameOverride: $NODE_NAME
mode: iptables
clusterCIDR: $POD_CIDR
healthzBindAddress: 127.0.0.1:$PROXY_PORT
metricsBindAddress: 127.0.0.1:$((PROXY_PORT + 1))
conntrack: {maxPerCore: 0}
iptables: {localhostNodePorts: false}
nodePortAddresses: [primary]
EOF
}

cluster_pki() {
  local state="$ADMIN_KUBECONFIG.state" pki
  [ -e "$state" ] || die "no cluster is up for $ADMIN_KUBECONFIG; run: make cluster-up"
  pki="$(cat "$state")/clusters/${TFLAUNCH_CLUSTER_NAME:-tflaunch}/pki"
  [ -e "$pki/ca.key" ] || die "the cluster's CA key is not in $pki"
  printf '%s\n' "$pki"
}

cmd_up() {
  local pki start i
  ADMIN_KUBECONFIG=$(realpath -m "${1:-$root/.cluster/kubeconfig}")
  need_root
  [ -e "$STATE/kubeconfig-path" ] &&
    die "a node is already up (state in $STATE); run: hack/node.sh down"
  pki=$(cluster_pki)
  cmd_build
  start=$(date +%s%N)
  mkdir -p "$STATE"/{pki,logs,pids,containerd,certs.d,cni/net.d,kubelet}
  printf '%s\n' "$ADMIN_KUBECONFIG" >"$STATE/kubeconfig-path"
  node_credentials "$pki"
  write_configs
  ip link show "$BRIDGE" >/dev/null 2>&1 || ip link add "$BRIDGE" type bridge
  ip addr replace "$GATEWAY/${POD_CIDR#*/}" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  start_daemon containerd
  "$BIN_DIR/ctr" --address "$STATE/containerd.sock" -n k8s.io images import \
    "$BIN_DIR/images/pause.tar" >/dev/null
  start_daemon coredns
  start_daemon kubelet
  start kube-proxy "$BIN_DIR/kube-proxy" --config "$STATE/kube-proxy.yaml" --v 2
  wait_for "kube-proxy's rules" 60 proxied kubernetes
  network_policies
  for i in "${@:2}"; do import_image "$i"; done
  log "node $NODE_NAME up in $((($(date +%s%N) - start) / 1000000)) ms (state in $STATE)"
}

# start_daemon NAME: containerd, coredns or kubelet as `up` starts it, returning once it
# answers (containerd its API, the kubelet a Ready node; CoreDNS at once).
start_daemon() {
  case $1 in
    containerd)
      PATH="$BIN_DIR:$PATH" start containerd "$BIN_DIR/containerd" --config "$STATE/containerd.toml"
      wait_for containerd 60 "$BIN_DIR/ctr" --address "$STATE/containerd.sock" version ;;
    coredns) start coredns "$BIN_DIR/coredns" -conf "$STATE/Corefile" ;;
    kubelet)
      start kubelet "$BIN_DIR/kubelet" --config "$STATE/kubelet.yaml" \
        --kubeconfig "$STATE/kubelet.kubeconfig" --root-dir "$STATE/kubelet" \
        --cert-dir "$STATE/pki" --hostname-override "$NODE_NAME" \
        --node-labels "$TAINT=true" --v 2
      wait_for "node $NODE_NAME" 120 kubectl_admin wait --for=condition=Ready "node/$NODE_NAME" --timeout=1s ;;
  esac
}

# The fault tests' crash and recovery of one daemon of a node that is up: `kill NAME`
# SIGKILLs it (no shutdown of its own: the pods' shims and containers go on), `revive NAME`
# starts it again as `up` did.
cmd_kill() {
  local file="$STATE/pids/$1.pid"
  daemon_name "$1"
  [ -e "$file" ] || die "$1 is not running (no $file)"
  kill -9 "$(cat "$file")" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$(cat "$file")" 2>/dev/null || break; sleep 0.1; done
  rm -f "$file"
}

cmd_revive() {
  daemon_name "$1"
  [ -e "$STATE/kubeconfig-path" ] || die "no node is up; run: make node-up"
  ADMIN_KUBECONFIG=$(cat "$STATE/kubeconfig-path")
  [ -e "$STATE/pids/$1.pid" ] && kill -0 "$(cat "$STATE/pids/$1.pid")" 2>/dev/null &&
    { log "$1 is running already"; return 0; }
  start_daemon "$1"
}

daemon_name() {
  case $1 in
    containerd | coredns | kubelet) ;;
    *) die "the node's daemons that can be killed and revived: containerd, coredns, kubelet" ;;
  esac
}

# NetworkPolicy enforcement: kube-router with only its network policy controller (upstream's
# kube-router-firewall-daemonset.yaml, as a process here: no registry for its image), what
# it reads granted to its user by the ClusterRole of upstream's manifests, read-only. It
# filters the pods' traffic in iptables' FORWARD, INPUT and OUTPUT chains with ipsets of
# the selected pods. (kube-network-policies, the reference engine, needs the nftables
# `queue` expression, which this machine's kernel lacks: docs/testing.md.)
network_policies() {
  { cat "$here/kube-router/clusterrole.yaml"; echo ---; cat <<EOF; } | kubectl_admin apply -f - >/dev/null
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: tflaunch-kube-router}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: tflaunch-kube-router}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: system:kube-router}
EOF
  start kube-router "$BIN_DIR/kube-router" --run-firewall=true --run-router=false \
    --run-service-proxy=false --enable-cni=false --kubeconfig "$STATE/kube-router.kubeconfig" \
    --hostname-override "$NODE_NAME" --service-cluster-ip-range "$SERVICE_CIDR" \
    --health-port "$((PROXY_PORT + 2))" --metrics-port 0 --v 2
  wait_for "kube-router's policy chains" 60 iptables -t filter -S KUBE-ROUTER-FORWARD
}

# proxied SERVICE: kube-proxy has written the rules of default/SERVICE's ClusterIP.
proxied() {
  local ip
  ip=$(kubectl_admin get service "$1" -n default -o jsonpath='{.spec.clusterIP}')
  iptables -t nat -S KUBE-SERVICES 2>/dev/null | grep -q -- "-d $ip/32"
}

import_image() {
  [ -e "$STATE/containerd.sock" ] || die "no node is up; run: make node-up"
  [ -r "$1" ] || die "no image archive at $1"
  "$BIN_DIR/ctr" --address "$STATE/containerd.sock" -n k8s.io images import "$1" >&2
}

# stop_pid NAME: SIGTERM the daemon NAME, SIGKILL after 15 s.
stop_pid() {
  local file="$STATE/pids/$1.pid" pid
  [ -e "$file" ] || return 0
  pid=$(cat "$file")
  kill "$pid" 2>/dev/null || { rm -f "$file"; return 0; }
  for _ in $(seq 75); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$file"
}

# Every process running one of the node's binaries (a shim outlives containerd by design).
node_pids() {
  local proc exe
  for proc in /proc/[0-9]*; do
    exe=$(readlink "$proc/exe" 2>/dev/null) || continue
    case $exe in "$BIN_DIR"/*) printf '%s\n' "${proc#/proc/}" ;; esac
  done
}

unmount_under() {
  local dir=$1 mnt
  # deepest first
  awk -v d="$dir/" 'index($2, d) == 1 || $2 == substr(d, 1, length(d) - 1) {print $2}' /proc/self/mounts |
    sort -r | while read -r mnt; do umount -l "$mnt" 2>/dev/null || true; done
}

# The chains the kubelet adds at start (its iptables canary and hint, and KUBE-FIREWALL,
# which drops packets to 127.0.0.0/8 from other addresses) and the jumps into them.
kubelet_iptables_cleanup() {
  local tool table chain
  for tool in iptables ip6tables; do
    command -v "$tool" >/dev/null 2>&1 || continue
    for chain in INPUT OUTPUT; do
      while "$tool" -t filter -D "$chain" -j KUBE-FIREWALL 2>/dev/null; do :; done
    done
    for table in filter nat mangle; do
      for chain in KUBE-FIREWALL KUBE-KUBELET-CANARY KUBE-IPTABLES-HINT; do
        "$tool" -t "$table" -F "$chain" 2>/dev/null && "$tool" -t "$table" -X "$chain" 2>/dev/null || true
      done
    done
  done
}

# kube-router's chains (the jumps into KUBE-ROUTER-*, its per-policy and per-pod chains) and
# its ipsets. (Its --cleanup-config does nothing for the policy controller in v2.1.0.)
kube_router_cleanup() {
  local rule chain set
  { iptables -t filter -S 2>/dev/null || true; } | { grep -E -- '^-A (INPUT|FORWARD|OUTPUT) .*-j KUBE-ROUTER-' || true; } |
    sed 's/^-A /-D /' | while read -r rule; do eval "iptables -t filter $rule" 2>/dev/null || true; done
  for chain in $({ iptables -t filter -S 2>/dev/null || true; } |
    awk '$1 == "-N" && $2 ~ /^KUBE-(ROUTER|NWPLCY|POD-FW|SRC|DST)-/ {print $2}'); do
    iptables -t filter -F "$chain" 2>/dev/null || true
  done
  for chain in $({ iptables -t filter -S 2>/dev/null || true; } |
    awk '$1 == "-N" && $2 ~ /^KUBE-(ROUTER|NWPLCY|POD-FW|SRC|DST)-/ {print $2}'); do
    iptables -t filter -X "$chain" 2>/dev/null || true
  done
  command -v ipset >/dev/null 2>&1 || return 0
  for set in $(ipset list -n 2>/dev/null | grep -E '^(inet6:)?KUBE-' || true); do
    ipset destroy "$set" 2>/dev/null || true
  done
}

cmd_down() {
  local sock="$STATE/containerd.sock" kubeconfig="" pid mnt subsystem
  [ -d "$STATE" ] || { log "no node is up"; return 0; }
  [ -e "$STATE/kubeconfig-path" ] && kubeconfig=$(cat "$STATE/kubeconfig-path")
  stop_pid kube-router
  stop_pid kube-proxy
  stop_pid kubelet
  # The pods' containers and sandboxes: stopping a sandbox runs the CNI DEL that frees its
  # address; then containerd, the shims it leaves, CoreDNS.
  if [ -S "$sock" ]; then
    timeout 60 "$BIN_DIR/crictl" --runtime-endpoint "unix://$sock" rmp --all --force >/dev/null 2>&1 || true
  fi
  stop_pid containerd
  stop_pid coredns
  # Anything still in the pods' cgroups (a container whose sandbox could not be removed).
  { cat /sys/fs/cgroup/pids/kubepods/cgroup.procs /sys/fs/cgroup/pids/kubepods/*/cgroup.procs \
    /sys/fs/cgroup/pids/kubepods/*/*/cgroup.procs /sys/fs/cgroup/pids/kubepods/*/*/*/cgroup.procs \
    2>/dev/null || true; } | while read -r pid; do kill -9 "$pid" 2>/dev/null || true; done
  for pid in $(node_pids); do kill -9 "$pid" 2>/dev/null || true; done
  for pid in $(node_pids); do
    for _ in $(seq 25); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  done
  unmount_under "$STATE"
  unmount_under /run/containerd
  # The CNI plugins bind /run/netns over itself (to share it); a pod netns mounted before
  # that bind sits beneath it, out of umount's reach, and its file cannot be removed (EBUSY).
  # So the binds go first, then each pod netns, however many times it is mounted.
  while mountpoint -q /run/netns 2>/dev/null; do umount -l /run/netns 2>/dev/null || break; done
  awk '$2 ~ "^/(var/)?run/netns/cni-" {print $2}' /proc/self/mounts | sort -u |
    while read -r mnt; do
      for _ in 1 2 3 4 5 6 7 8; do umount -l "$mnt" 2>/dev/null || break; done
      rm -f "$mnt" 2>/dev/null || echo "node: $mnt is still mounted; left in place" >&2
    done
  rm -rf /run/containerd
  # The pods' cgroups the kubelet made (empty once their processes are gone).
  for subsystem in /sys/fs/cgroup/*/; do
    [ -d "$subsystem/kubepods" ] &&
      find "$subsystem/kubepods" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  ip link del "$BRIDGE" 2>/dev/null || true
  kubelet_iptables_cleanup
  kube_router_cleanup
  # kube-proxy's chains (KUBE-SERVICES and the rest), as it removes them itself.
  [ -x "$BIN_DIR/kube-proxy" ] && "$BIN_DIR/kube-proxy" --cleanup >/dev/null 2>&1 || true
  # Rules the CNI plugins left for this network (portmap's, if a pod's hostPort outlived
  # its sandbox): each carries the network's name in its comment.
  local rule
  { iptables -t nat -S 2>/dev/null || true; } | { grep -- '"tflaunch"' || true; } |
    sed 's/^-A /-D /' | while read -r rule; do eval "iptables -t nat $rule" 2>/dev/null || true; done
  if [ -n "$kubeconfig" ] && [ -e "$kubeconfig" ] && [ -x "$CONTROL_PLANE_BIN/kubectl" ]; then
    "$CONTROL_PLANE_BIN/kubectl" --kubeconfig "$kubeconfig" delete node "$NODE_NAME" \
      --ignore-not-found --wait=false --request-timeout=10s >/dev/null 2>&1 || true
  fi
  rm -rf "$STATE"
  log "down"
}

case ${1:-} in
  build) cmd_build ;;
  up) shift; cmd_up "$@" ;;
  down) cmd_down ;;
  import) [ -n "${2:-}" ] || die "usage: hack/node.sh import ARCHIVE"; import_image "$2" ;;
  crictl) shift; exec "$BIN_DIR/crictl" --runtime-endpoint "unix://$STATE/containerd.sock" "$@" ;;
  bin) printf '%s\n' "$BIN_DIR" ;;
  state) printf '%s\n' "$STATE" ;;
  smoke-image) smoke_image ;;
  kill) cmd_kill "${2:-}" ;;
  revive) cmd_revive "${2:-}" ;;
  *) die "usage: hack/node.sh build | up [KUBECONFIG] | down | import ARCHIVE | crictl ARG... | kill|revive containerd|coredns|kubelet | smoke-image | bin | state" ;;
esac

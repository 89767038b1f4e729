#!/usr/bin/env bash
# The kind rig on this machine (offline, beside the real node): what `make kind-up` does on a
# laptop with internet, with the sandbox's workarounds, all kept here:
#   - kind v0.33.0 and kubeadm built from the Go module proxy, cached by version;
#   - a docker daemon of our own that leaves iptables alone (hack/kind/docker.sh);
#   - the node image built offline (hack/kind/node-image.sh), not kindest/node from Docker Hub;
#   - `docker` for kind is hack/kind/bin/docker (--privileged rewritten; see it);
#   - kindest/kindnetd is not available: kind's default CNI is off and each node gets the CNI
#     bridge plugin on its pod CIDR plus a route to every other node's pod CIDR (what
#     kindnetd does, set once after the nodes join);
#   - the registry (distribution v3, built from the Go proxy) runs beside the cluster, and the
#     nodes' containerd pulls localhost:$REGISTRY_PORT from it (kind's local-registry pattern);
#     a second one on $REGISTRY_AUTH_PORT serves the same images behind htpasswd (a private
#     registry, for spec.imagePullSecrets);
#   - $SHARED on the host is mounted into every node at /tflaunch-shared: a hostPath volume
#     there is one directory for pods on any node (a ReadWriteMany checkpoint claim);
#   - nothing in kind enforces NetworkPolicy (kindnetd would): every node runs kube-router's
#     network policy controller (hack/kind/kube-router.service), given its credentials here.
# The cluster's shape (one control plane, two workers) comes from manifests/kind/cluster.yaml.
#
# Usage: hack/kind.sh build | up | push [trainer|operator] | down | env | registry up|down | kind ARG...
#   build  kind, kubeadm, the registry and the node image (cached)
#   up     dockerd, the registry and the cluster CLUSTER (default tflaunch), nodes Ready
#   push   the offline images (hack/images.sh) into the registry, as localhost:PORT/NAME:TAG
#   down   delete the cluster, stop the registry and dockerd
#   registry up|down  start or stop both registries alone (tests stop it to see a pull fail)
#   env    export lines for a shell: KIND (the kind wrapper), DOCKER_HOST, KUBECONFIG,
#          REGISTRY, REGISTRY_AUTH (and its user and password file), SHARED
#   kind   run the pinned kind with this rig's docker
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
# shellcheck source=hack/lib.sh
source "$here/lib.sh"

KIND_VERSION=v0.33.0
REGISTRY_VERSION=v3.1.2
K8S_VERSION=$(version k8s.io/kubernetes "$here/k8s/go.mod")
RECIPE=1
KIND_DIR=$CACHE_ROOT/kind/k8s-$K8S_VERSION-kind-$KIND_VERSION-r$RECIPE
REGISTRY_DIR=$CACHE_ROOT/kind/registry-$REGISTRY_VERSION
CLUSTER=${CLUSTER:-tflaunch}
REGISTRY_PORT=${REGISTRY_PORT:-5001}
REGISTRY_AUTH_PORT=${REGISTRY_AUTH_PORT:-5002}
REGISTRY_AUTH_USER=tflaunch
SHARED=$KIND_DIR/shared-$CLUSTER
POD_SUBNET=10.250.0.0/16 # not the real node's 10.244.0.0/24: its rules must never match ours
SERVICE_SUBNET=10.96.0.0/16
export DOCKER_HOST=${TFLAUNCH_KIND_DOCKER_HOST:-$("$here/kind/docker.sh" host)}
export PATH="$here/kind/bin:$PATH"

log() { printf 'kind: %s\n' "$*" >&2; }
die() { printf 'kind: error: %s\n' "$*" >&2; exit 2; }

kind_module() { printf '%s/sigs.k8s.io/kind@%s\n' "$(go env GOMODCACHE)" "$KIND_VERSION"; }

build_tools() {
  local start=$SECONDS ldflags="" pkg minor=${K8S_VERSION#v1.}
  mkdir -p "$KIND_DIR" "$REGISTRY_DIR"
  if [ ! -x "$KIND_DIR/kind" ] || [ ! -d "$(kind_module)/images/base" ]; then
    (cd "$KIND_DIR" && GOBIN=$KIND_DIR CGO_ENABLED=0 GOFLAGS=-modcacherw go install "sigs.k8s.io/kind@$KIND_VERSION")
    log "built kind $KIND_VERSION in $((SECONDS - start)) s"
  fi
  if [ ! -x "$KIND_DIR/kubeadm" ]; then
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      ldflags+="-X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=${minor%%.*} -X $pkg.gitTreeState=clean "
    done
    (cd "$here/kubeadm" && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w $ldflags" \
      -o "$KIND_DIR/kubeadm.tmp" k8s.io/kubernetes/cmd/kubeadm)
    mv "$KIND_DIR/kubeadm.tmp" "$KIND_DIR/kubeadm"
    log "built kubeadm $K8S_VERSION in $((SECONDS - start)) s"
  fi
  if [ ! -x "$REGISTRY_DIR/registry" ]; then
    (cd "$REGISTRY_DIR" && GOBIN=$REGISTRY_DIR CGO_ENABLED=0 GOFLAGS=-modcacherw \
      go install "github.com/distribution/distribution/v3/cmd/registry@$REGISTRY_VERSION")
    log "built registry $REGISTRY_VERSION in $((SECONDS - start)) s"
  fi
}

node_image() {
  KIND_DIR=$KIND_DIR KIND_MODULE=$(kind_module) "$here/kind/node-image.sh"
}

kind_() { "$KIND_DIR/kind" "$@"; }

# The cluster config: manifests/kind/cluster.yaml with this rig's node image, no default CNI,
# the registry mirror, and the kubeadm settings for the project's own images.
write_config() {
  local image=$1 out=$2
  sed -e "s|^\( *\)image: kindest/node:.*|\1image: $image\n\1extraMounts: [{hostPath: $SHARED, containerPath: /tflaunch-shared}]|" \
    "$root/manifests/kind/cluster.yaml" >"$out"
  cat >>"$out" <<YAML
networking:
  disableDefaultCNI: true
  podSubnet: $POD_SUBNET
  serviceSubnet: $SERVICE_SUBNET
containerdConfigPatches:
  - |-
    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = "/etc/containerd/certs.d"
kubeadmConfigPatches:
  - |
    kind: ClusterConfiguration
    imageRepository: tflaunch.dev/k8s
    etcd:
      local:
        imageTag: $(version go.etcd.io/etcd/server/v3 "$here/etcd/go.mod")
    dns:
      imageTag: $(version github.com/coredns/coredns "$here/coredns/go.mod")
  - |
    kind: KubeletConfiguration
    failCgroupV1: false
YAML
}

# registry_one NAME PORT [AUTH]: a registry on PORT serving the one storage directory; with
# AUTH, behind htpasswd (user REGISTRY_AUTH_USER, a password made once, kept beside it).
registry_one() {
  local name=$1 port=$2 auth=${3:-} state=$KIND_DIR/registry
  mkdir -p "$state/data"
  if [ -f "$state/$name.pid" ] && kill -0 "$(cat "$state/$name.pid")" 2>/dev/null; then return 0; fi
  local extra=""
  if [ -n "$auth" ]; then
    command -v htpasswd >/dev/null || die "htpasswd not found: apt-get install apache2-utils"
    [ -s "$state/auth-password" ] || (umask 077 && head -c 18 /dev/urandom | base64 >"$state/auth-password")
    htpasswd -Bbn "$REGISTRY_AUTH_USER" "$(cat "$state/auth-password")" >"$state/htpasswd"
    extra="auth: {htpasswd: {realm: tflaunch-kind, path: $state/htpasswd}}"
  fi
  cat >"$state/$name.yml" <<YAML
version: 0.1
log: {level: warn}
storage: {filesystem: {rootdirectory: $state/data}, delete: {enabled: true}}
http: {addr: 0.0.0.0:$port}
$extra
YAML
  # A clean environment: the registry reads any REGISTRY_* variable as a setting (this script's
  # `env` exports some), and with no OpenTelemetry collector here it would log a failed trace
  # export every few seconds.
  env -i PATH="$PATH" OTEL_TRACES_EXPORTER=none \
    nohup "$REGISTRY_DIR/registry" serve "$state/$name.yml" >"$state/$name.log" 2>&1 &
  echo $! >"$state/$name.pid"
  for _ in $(seq 1 40); do
    # 200 open, 401 behind auth: either way it answers
    case $(curl -sS -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v2/" 2>/dev/null) in
      200 | 401) log "registry $name up on :$port"; return 0 ;;
    esac
    sleep 0.25
  done
  die "the registry $name did not answer on :$port (log: $state/$name.log)"
}

registry_up() {
  registry_one registry "$REGISTRY_PORT"
  registry_one registry-auth "$REGISTRY_AUTH_PORT" auth
}

registry_down() {
  local name pidfile
  for name in registry registry-auth; do
    pidfile=$KIND_DIR/registry/$name.pid
    [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null || true
    rm -f "$pidfile"
  done
}

# Every node: the CNI bridge on its pod CIDR, a route to each other node's pod CIDR, the
# registry mirror (localhost:PORT on a node means the registry on the docker bridge's gateway).
configure_nodes() {
  local kubeconfig=$1 node cidr ip other ocidr oip gateway
  gateway=$(docker network inspect kind -f '{{range .IPAM.Config}}{{if .Gateway}}{{.Gateway}} {{end}}{{end}}' | awk '{print $1}')
  [ -n "$gateway" ] || gateway=$(docker network inspect kind -f '{{range .IPAM.Config}}{{.Subnet}} {{end}}' | awk '{split($1, a, "."); print a[1]"."a[2]"."a[3]".1"}')
  mapfile -t nodes < <(kubectl_ "$kubeconfig" get nodes -o jsonpath='{range .items[*]}{.metadata.name} {.spec.podCIDR} {.status.addresses[?(@.type=="InternalIP")].address}{"\n"}{end}')
  for line in "${nodes[@]}"; do
    read -r node cidr ip <<<"$line"
    docker exec -i "$node" sh -euc "mkdir -p /etc/cni/net.d && cat >/etc/cni/net.d/10-tflaunch.conflist" <<JSON
{"cniVersion": "1.0.0", "name": "tflaunch-kind", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$cidr"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
JSON
    for other in "${nodes[@]}"; do
      read -r _ ocidr oip <<<"$other"
      [ "$oip" = "$ip" ] || docker exec "$node" ip route replace "$ocidr" via "$oip"
    done
    # Pods reach what is outside the pod network (the registry, the host) as their node.
    docker exec "$node" sh -c "iptables -t nat -C POSTROUTING -s $POD_SUBNET ! -d $POD_SUBNET -j MASQUERADE 2>/dev/null ||
      iptables -t nat -A POSTROUTING -s $POD_SUBNET ! -d $POD_SUBNET -j MASQUERADE"
    for port in "$REGISTRY_PORT" "$REGISTRY_AUTH_PORT"; do
      docker exec "$node" sh -euc "mkdir -p /etc/containerd/certs.d/localhost:$port &&
        printf '[host.\"http://$gateway:$port\"]\n  capabilities = [\"pull\", \"resolve\"]\n' \
          >/etc/containerd/certs.d/localhost:$port/hosts.toml"
    done
  done
}

kubectl_() { local kubeconfig=$1; shift; "$("$here/cluster.sh" bin)/kubectl" --kubeconfig "$kubeconfig" "$@"; }

# NetworkPolicy enforcement on every node: kube-router's network policy controller, the unit
# hack/kind/kube-router.service baked into the node image. What it reads is granted to its
# ServiceAccount by the ClusterRole of upstream's manifests, read-only (hack/node.sh grants
# the same to the real node's kube-router). Each node gets a token for it and the API
# server's address as its kubelet knows it; the unit is (re)started, and on a node that
# restarts later systemd starts it again with them.
network_policies() {
  local kubeconfig=$1 start=$SECONDS token node server
  { cat "$here/kube-router/clusterrole.yaml"; echo ---; cat <<EOF; } | kubectl_ "$kubeconfig" apply -f - >/dev/null
apiVersion: v1
kind: ServiceAccount
metadata: {name: kube-router, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: tflaunch-kube-router}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: tflaunch-kube-router}
subjects:
- {kind: ServiceAccount, name: kube-router, namespace: kube-system}
EOF
  # 48 h, as the real node's certificates: longer than a test rig lives; `up` renews it.
  token=$(kubectl_ "$kubeconfig" -n kube-system create token kube-router --duration=48h)
  for node in $(kind_ get nodes --name "$CLUSTER"); do
    server=$(docker exec "$node" sed -n 's/^ *server: *//p' /etc/kubernetes/kubelet.conf)
    [ -n "$server" ] || die "no API server address in $node's /etc/kubernetes/kubelet.conf"
    docker exec -i "$node" sh -euc 'umask 077 && mkdir -p /etc/kube-router && cat >/etc/kube-router/kubeconfig' <<EOF
apiVersion: v1
kind: Config
clusters: [{name: kind, cluster: {server: "$server", certificate-authority: /etc/kubernetes/pki/ca.crt}}]
users: [{name: kube-router, user: {token: "$token"}}]
contexts: [{name: kube-router, context: {cluster: kind, user: kube-router}}]
current-context: kube-router
EOF
    printf 'NODE_NAME=%s\nSERVICE_CIDR=%s\n' "$node" "$SERVICE_SUBNET" |
      docker exec -i "$node" sh -c 'cat >/etc/kube-router/env'
    docker exec "$node" systemctl restart kube-router
  done
  for node in $(kind_ get nodes --name "$CLUSTER"); do
    for _ in $(seq 1 120); do
      docker exec "$node" iptables -t filter -S KUBE-ROUTER-FORWARD >/dev/null 2>&1 && continue 2
      sleep 0.5
    done
    docker exec "$node" journalctl -u kube-router --no-pager -n 20 >&2 || true
    die "kube-router's policy chains did not appear on $node in 60 s"
  done
  log "NetworkPolicy enforced by kube-router on every node in $((SECONDS - start)) s"
}

cmd_up() {
  local start=$SECONDS image config kubeconfig
  "$here/kind/docker.sh" up
  build_tools
  image=$(node_image)
  # Node images of earlier inputs (1.2 GB each); one still in use stays.
  docker images tflaunch.dev/kind-node --format '{{.Repository}}:{{.Tag}}' | grep -vxF "$image" |
    xargs -r docker rmi >/dev/null 2>&1 || true
  registry_up
  mkdir -p "$SHARED"
  kubeconfig=$KIND_DIR/kubeconfig-$CLUSTER
  if ! kind_ get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
    config=$KIND_DIR/cluster-$CLUSTER.yaml
    write_config "$image" "$config"
    # --kubeconfig: never the user's ~/.kube/config.
    kind_ create cluster --name "$CLUSTER" --config "$config" --kubeconfig "$kubeconfig"
  fi
  kind_ get kubeconfig --name "$CLUSTER" >"$kubeconfig"
  configure_nodes "$kubeconfig"
  kubectl_ "$kubeconfig" wait --for=condition=Ready nodes --all --timeout=180s >&2
  kubectl_ "$kubeconfig" -n kube-system rollout status deployment/coredns --timeout=180s >&2
  network_policies "$kubeconfig"
  log "cluster $CLUSTER up in $((SECONDS - start)) s (kubeconfig: $kubeconfig)"
}

# push: the offline images (make images-offline: docker-archives in the cache, and Kubeflow's
# TFJob example as an OCI layout directory) into the registry, as `make push` does with
# docker on a laptop, named without docker.io's prefixes; prints each pushed reference.
cmd_push() {
  local ref archive source start=$SECONDS
  command -v skopeo >/dev/null || die "skopeo not found: apt-get install skopeo"
  registry_up
  while read -r ref archive; do
    [ -n "$archive" ] || continue
    ref=${ref#docker.io/}
    ref=${ref#library/}
    source=docker-archive:$archive
    [ ! -d "$archive" ] || source=oci:$archive
    skopeo copy --quiet --dest-tls-verify=false "$source" "docker://localhost:$REGISTRY_PORT/$ref" >&2
    printf 'localhost:%s/%s\n' "$REGISTRY_PORT" "$ref"
  done < <("$here/images.sh" build "${1:-all}")
  log "pushed in $((SECONDS - start)) s"
}

# build: the node image is built by the rig's dockerd; one this command started stops again.
cmd_build() {
  local running=true
  "$here/kind/docker.sh" status >/dev/null 2>&1 || running=false
  "$here/kind/docker.sh" up
  build_tools
  node_image >/dev/null
  [ "$running" = true ] || "$here/kind/docker.sh" down
}

cmd_down() {
  if [ -x "$KIND_DIR/kind" ] && "$here/kind/docker.sh" status >/dev/null 2>&1; then
    kind_ delete cluster --name "$CLUSTER" --kubeconfig "$KIND_DIR/kubeconfig-$CLUSTER" || true
  fi
  rm -f "$KIND_DIR/kubeconfig-$CLUSTER" # no kubeconfig: no cluster (tests/kind reads it so)
  registry_down
  # kind's docker network outlives the cluster; its bridge would stay on the host.
  if "$here/kind/docker.sh" status >/dev/null 2>&1; then docker network rm kind >/dev/null 2>&1 || true; fi
  "$here/kind/docker.sh" down
}

case ${1:-} in
  build) cmd_build ;;
  up) cmd_up ;;
  down) cmd_down ;;
  env)
    printf 'export DOCKER_HOST=%s\nexport KIND=%s\nexport KUBECONFIG=%s\nexport REGISTRY=localhost:%s\n' \
      "$DOCKER_HOST" "$here/kind/bin/kind" "$KIND_DIR/kubeconfig-$CLUSTER" "$REGISTRY_PORT"
    printf 'export REGISTRY_AUTH=localhost:%s\nexport REGISTRY_AUTH_USER=%s\nexport REGISTRY_AUTH_PASSWORD_FILE=%s\n' \
      "$REGISTRY_AUTH_PORT" "$REGISTRY_AUTH_USER" "$KIND_DIR/registry/auth-password"
    printf 'export SHARED=%s\n' "$SHARED" ;;
  registry) case ${2:-} in
      up) registry_up ;;
      down) registry_down ;;
      *) die "usage: hack/kind.sh registry up | down" ;;
    esac ;;
  push) cmd_push "${2:-all}" ;;
  kind) shift; kind_ "$@" ;;
  *) die "usage: hack/kind.sh build | up | push [trainer|operator] | down | env | registry up|down | kind ARG..." ;;
esac

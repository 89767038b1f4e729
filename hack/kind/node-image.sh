#!/usr/bin/env bash
# The kind node image, built offline on this machine with the steps of kind's own
# `kind build node-image` on top of its images/base (kind v0.33.0's files, read from the Go
# module cache where `go install sigs.k8s.io/kind` put them; none of them are copied into
# this repository):
#   base:  a Debian root filesystem with systemd and the node tools (hack/kind/rootfs.sh,
#          debootstrap), kind's entrypoint, /kind/bin scripts, systemd units and containerd
#          config; containerd, ctr, the runc shim, crictl and the CNI plugins from the real
#          node's build (hack/node.sh), runc from Debian; cri-base.json from `ctr oci spec`;
#          kube-router from the same build, as a unit enforcing NetworkPolicy
#          (hack/kind/kube-router.service; hack/kind.sh gives it its credentials);
#   node:  kubeadm, kubelet and kubectl in /usr/bin, /kind/version, and the control plane's
#          images (kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy, etcd,
#          CoreDNS, pause) imported into the node's containerd (k8s.io namespace, pinned).
# The images are named under tflaunch.dev/k8s (they are this project's builds, not the
# registry.k8s.io ones): the cluster config (hack/kind.sh) points kubeadm's imageRepository
# and the etcd/CoreDNS tags at them.
#
# Usage: node-image.sh   (prints the image reference; cached by a key of its inputs)
# Environment: DOCKER_HOST (hack/kind/docker.sh host), KIND_DIR, KIND_MODULE (kind's module dir).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
hack=$(cd "$here/.." && pwd)
# shellcheck source=hack/lib.sh
source "$hack/lib.sh"

K8S_VERSION=$(version k8s.io/kubernetes "$hack/k8s/go.mod")
ETCD_VERSION=$(version go.etcd.io/etcd/server/v3 "$hack/etcd/go.mod")
COREDNS_VERSION=$(version github.com/coredns/coredns "$hack/coredns/go.mod")
REPO=tflaunch.dev/k8s
PAUSE_TAG=3.10.2
: "${KIND_DIR:?}" "${KIND_MODULE:?}"
NODE_BIN=$("$hack/node.sh" bin)
CP_BIN=$("$hack/cluster.sh" bin)
DOCKER=${DOCKER:-docker}

log() { printf 'kind-node-image: %s\n' "$*" >&2; }
die() { printf 'kind-node-image: error: %s\n' "$*" >&2; exit 2; }

key=$({ cat "$here/node-image.sh" "$here/rootfs.sh" "$here/sandbox-entrypoint" \
  "$here/kube-router.service"
  echo "$K8S_VERSION $ETCD_VERSION $COREDNS_VERSION $KIND_MODULE $NODE_BIN $CP_BIN"; } | sha256sum | cut -c1-16)
IMAGE=tflaunch.dev/kind-node:$K8S_VERSION-$key
if $DOCKER image inspect "$IMAGE" >/dev/null 2>&1; then printf '%s\n' "$IMAGE"; exit 0; fi

start=$SECONDS
"$hack/node.sh" build >&2
[ -x "$CP_BIN/kube-apiserver" ] || "$hack/cluster.sh" build >&2
ROOTFS=$KIND_DIR/rootfs-bookworm-$(sha256sum "$here/rootfs.sh" | cut -c1-16).tar
[ -e "$ROOTFS" ] || "$here/rootfs.sh" "$ROOTFS"

work=$(mktemp -d "$KIND_DIR/node-image.work.XXXXXX")
builder=""
cleanup() {
  [ -z "$builder" ] || $DOCKER rm -f "$builder" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

# The control plane's images: each binary alone in a layer (with its libraries), except
# kube-proxy, which runs iptables: it gets the node's Debian root filesystem under it.
images=$work/images
mkdir -p "$images"
one_image() { # NAME:TAG SRC DEST [ROOTFS_TAR] [--entrypoint ...]
  local ref=$1 src=$2 dest=$3 base=$4
  shift 4
  local dir=$work/img
  rm -rf "$dir" && mkdir -p "$dir"
  [ -z "$base" ] || tar -C "$dir" -xf "$base"
  install -D -m 0755 "$src" "$dir$dest"
  # hack/cluster.sh builds the control plane with cgo: its shared libraries go in with it.
  local lib
  for lib in $(ldd "$src" 2>/dev/null | grep -o '/[^ ]*' || true); do
    install -D -m 0755 "$(readlink -f "$lib")" "$dir$lib"
  done
  mkdir -p "$dir/tmp" "$dir/etc"
  chmod 1777 "$dir/tmp"
  python3 "$hack/oci-archive.py" "$dir" "$REPO/$ref" "$images/${ref%%:*}.tar" "$@"
}
for b in kube-apiserver kube-controller-manager kube-scheduler; do
  one_image "$b:$K8S_VERSION" "$CP_BIN/$b" "/usr/local/bin/$b" ""
done
one_image "kube-proxy:$K8S_VERSION" "$NODE_BIN/kube-proxy" /usr/local/bin/kube-proxy "$ROOTFS"
one_image "etcd:$ETCD_VERSION" "$CP_BIN/etcd" /usr/local/bin/etcd ""
one_image "coredns:$COREDNS_VERSION" "$NODE_BIN/coredns" /coredns "" --entrypoint /coredns
one_image "pause:$PAUSE_TAG" "$NODE_BIN/pause" /pause "" --entrypoint /pause --user 65535:65535
rm -rf "$work/img"
log "images: $(find "$images" -name '*.tar' -printf '%f ')"

# The base: kind's images/base steps, on the debootstrap root filesystem.
root=$work/rootfs
mkdir -p "$root"
tar -C "$root" -xf "$ROOTFS"
files=$KIND_MODULE/images/base/files
install -D -m 0755 "$files"/usr/local/bin/* -t "$root/usr/local/bin/"
mkdir -p "$root/kind/bin" "$root/etc/containerd" "$root/etc/default" "$root/etc/sysctl.d" \
  "$root/etc/systemd/system/kubelet.service.d" "$root/opt/cni/bin" "$root/etc/kubernetes/manifests"
install -m 0755 "$files"/kind/bin/* "$here/sandbox-entrypoint" -t "$root/kind/bin/"
install -m 0644 "$files"/etc/crictl.yaml -t "$root/etc/"
install -m 0644 "$files"/etc/containerd/* -t "$root/etc/containerd/"
install -m 0644 "$files"/etc/default/* -t "$root/etc/default/"
install -m 0644 "$files"/etc/sysctl.d/* -t "$root/etc/sysctl.d/"
install -m 0644 "$files"/etc/systemd/system/*.service "$files"/etc/systemd/system/*.slice -t "$root/etc/systemd/system/"
install -m 0644 "$files"/etc/systemd/system/kubelet.service.d/* -t "$root/etc/systemd/system/kubelet.service.d/"
# This machine's root has no CAP_SYS_RESOURCE: containerd's unit must not raise its limits
# past the container's hard limit (systemd fails a unit whose limits it cannot set).
mkdir -p "$root/etc/systemd/system/containerd.service.d"
printf '[Service]\nLimitNOFILE=1048576\nLimitNPROC=\nLimitCORE=\n' \
  >"$root/etc/systemd/system/containerd.service.d/20-tflaunch-sandbox.conf"
find "$root/lib/systemd/system/sysinit.target.wants/" -name systemd-tmpfiles-setup.service -delete
rm -f "$root"/lib/systemd/system/multi-user.target.wants/* "$root"/etc/systemd/system/*.wants/* \
  "$root"/lib/systemd/system/local-fs.target.wants/* "$root"/lib/systemd/system/sockets.target.wants/*udev* \
  "$root"/lib/systemd/system/sockets.target.wants/*initctl* "$root"/lib/systemd/system/basic.target.wants/*
echo "ReadKMsg=no" >>"$root/etc/systemd/journald.conf"
ln -sf /usr/lib/systemd/systemd "$root/sbin/init"
mkdir -p "$root/etc/systemd/system/multi-user.target.wants"
install -m 0644 "$here/kube-router.service" -t "$root/etc/systemd/system/"
for unit in kubelet containerd undo-mount-hacks kube-router; do
  ln -sf "/etc/systemd/system/$unit.service" "$root/etc/systemd/system/multi-user.target.wants/$unit.service"
done
ln -sf /dev/null "$root/etc/systemd/system/systemd-binfmt.service"
for b in containerd ctr containerd-shim-runc-v2 crictl kube-router; do install -m 0755 "$NODE_BIN/$b" "$root/usr/local/bin/"; done
install -m 0755 "$NODE_BIN"/cni/* -t "$root/opt/cni/bin/"
install -D -m 0755 "$(command -v runc)" "$root/usr/local/sbin/runc"
"$NODE_BIN/ctr" oci spec |
  jq '.hooks.createContainer[.hooks.createContainer | length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' |
  jq 'del(.process.rlimits)' >"$root/etc/containerd/cri-base.json"
# The node: kind build node-image's steps.
install -m 0755 "$NODE_BIN/kubelet" "$KIND_DIR/kubeadm" "$CP_BIN/kubectl" -t "$root/usr/bin/"
printf '%s\n' "$K8S_VERSION" >"$root/kind/version"
sed -i "s|sandbox_image = .*|sandbox_image = \"$REPO/pause:$PAUSE_TAG\"|" "$root/etc/containerd/config.toml"
# Sandbox only: the kubelet asks for negative oom_score_adj values (-998 for sandboxes);
# lowering one needs CAP_SYS_RESOURCE, which the nodes here lack, and runc then fails every
# container. Restricted, containerd clamps them to its own score (as the real node does).
sed -i "s|restrict_oom_score_adj = false|restrict_oom_score_adj = true|" "$root/etc/containerd/config.toml"

base=tflaunch.dev/kind-node-base:$key
tar --numeric-owner --xattrs -C "$root" -cf - . | $DOCKER import - "$base" >/dev/null
rm -rf "$root"
# Import the images into the node's containerd as kind does (containerd run in the image).
builder=tflaunch-kind-build-$key
$DOCKER run -d --name "$builder" --entrypoint sleep --cap-add ALL --cap-drop SYS_RESOURCE \
  --security-opt seccomp=unconfined --security-opt apparmor=unconfined "$base" infinity >/dev/null
$DOCKER cp "$images" "$builder:/kind/images"
# shellcheck disable=SC2016  # run by the builder's bash
$DOCKER exec "$builder" bash -euc '
  nohup containerd >/tmp/containerd.log 2>&1 &
  for _ in $(seq 1 60); do [ -S /run/containerd/containerd.sock ] && ctr info >/dev/null 2>&1 && break; sleep 0.5; done
  for f in /kind/images/*.tar; do
    ctr --namespace=k8s.io images import --label=io.cri-containerd.pinned=pinned --all-platforms --no-unpack --digests "$f" >/dev/null
  done
  ctr --namespace=k8s.io images list -q
  pkill containerd; for _ in $(seq 1 30); do pgrep containerd >/dev/null || break; sleep 0.5; done
  rm -rf /kind/images /tmp/containerd.log
' >&2
# (docker 20.10 cannot set STOPSIGNAL on commit: `docker stop` of a node waits out its timeout.)
$DOCKER commit \
  --change 'ENV container=docker' \
  --change 'ENTRYPOINT ["/kind/bin/sandbox-entrypoint", "/usr/local/bin/entrypoint", "/sbin/init"]' \
  "$builder" "$IMAGE" >/dev/null
$DOCKER rm -f "$builder" >/dev/null
builder=""
$DOCKER rmi "$base" >/dev/null
log "built $IMAGE in $((SECONDS - start)) s"
printf '%s\n' "$IMAGE"

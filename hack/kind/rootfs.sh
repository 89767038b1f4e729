#!/usr/bin/env bash
# The kind node's base root filesystem, offline: what kind's images/base Dockerfile installs
# into debian-slim (systemd, iptables, conntrack, iproute2, mount tools...), from Debian's own
# packages with debootstrap, packed as a tarball. hack/kind/node-image.sh adds the binaries.
#
# Usage: rootfs.sh OUT.tar   Environment: SUITE (default bookworm), MIRROR. Needs root.
set -euo pipefail

out=${1:?usage: rootfs.sh OUT.tar}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
suite=${SUITE:-bookworm}
mirror=${MIRROR:-$("$here/../../docker/base/apt-mirror.sh")}
# kind's base package list, less what a CPU test cluster never uses (NFS, iSCSI, fuse,
# e2fsprogs); plus ipset (kube-router's NetworkPolicy sets).
packages=systemd,systemd-sysv,dbus,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod
packages+=,libseccomp2,pigz,bash,ca-certificates,curl,jq,procps,socat,ipset,iputils-ping

die() { printf 'kind-rootfs: %s\n' "$*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "debootstrap needs root"
command -v debootstrap >/dev/null || die "debootstrap not found: apt-get install debootstrap"

work=$(mktemp -d "${out}.work.XXXXXX")
trap 'rm -rf "$work"' EXIT
root="$work/rootfs"
printf 'kind-rootfs: debootstrap %s from %s\n' "$suite" "$mirror" >&2
debootstrap --variant=minbase --include="$packages" "$suite" "$root" "$mirror" \
  >"$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log" >&2; die "debootstrap failed"; }
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/var/log/* \
  "$root"/etc/resolv.conf "$root"/etc/hostname
: >"$root/etc/machine-id"
tar --numeric-owner --xattrs --acls -C "$root" -cf "$out.partial" .
mv "$out.partial" "$out"
printf 'kind-rootfs: wrote %s (%s)\n' "$out" "$(du -h "$out" | cut -f1)" >&2

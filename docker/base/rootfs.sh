#!/usr/bin/env bash
# Build a minimal Debian root filesystem from Debian's own packages and pack it as a tarball,
# the first layer of the base images that docker/base/Dockerfile makes (no image registry:
# hack/images.sh builds the trainer and operator images on top of it, offline).
#
# debootstrap --variant=minbase, plus Python 3 and its venv module (the base's Python lives in
# a venv, so pip never fights Debian's own packages) and CA certificates (pip and the MNIST
# download need TLS). The package caches and lists are removed, as Debian's official images do.
#
# Usage: rootfs.sh OUT.tar
# Environment: SUITE (default bookworm), MIRROR (default: the Debian archive
#              this machine's apt uses, docker/base/apt-mirror.sh),
#              PACKAGES (extra packages, comma-separated). Needs root and debootstrap.
set -euo pipefail

out=${1:?usage: rootfs.sh OUT.tar}
suite=${SUITE:-bookworm}
mirror=${MIRROR:-$("$(dirname "${BASH_SOURCE[0]}")/apt-mirror.sh")}
packages=python3,python3-venv,ca-certificates${PACKAGES:+,$PACKAGES}

die() { printf 'rootfs: %s\n' "$*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "debootstrap needs root: run as root (or sudo)"
command -v debootstrap >/dev/null || die "debootstrap not found: apt-get install debootstrap"

work=$(mktemp -d "${out}.work.XXXXXX")
trap 'rm -rf "$work"' EXIT
root="$work/rootfs"

printf 'rootfs: debootstrap %s (minbase + %s) from %s\n' "$suite" "$packages" "$mirror" >&2
debootstrap --variant=minbase --include="$packages" "$suite" "$root" "$mirror" \
  >"$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log" >&2; die "debootstrap failed"; }

# What Debian's official images leave out: package caches, lists, logs. The image gets a
# resolv.conf from its runtime; debootstrap copied this machine's.
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
  "$root"/var/cache/debconf/*-old "$root"/var/log/* "$root"/etc/resolv.conf "$root"/etc/hostname
: >"$root/etc/machine-id"

tar --numeric-owner --xattrs --acls -C "$root" -cf "$out.partial" .
mv "$out.partial" "$out"
printf 'rootfs: wrote %s (%s)\n' "$out" "$(du -h "$out" | cut -f1)" >&2

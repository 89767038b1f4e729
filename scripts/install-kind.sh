#!/usr/bin/env bash
# Install the pinned kind release into DEST_DIR (default .venv/bin), checking its sha256.
#
# Used by `make kind-install` and the e2e workflow. The version must match the node image
# pinned in manifests/kind/cluster.yaml (kind supports a node image only with the release it
# was built for). Another version needs its digest too:
#   KIND_VERSION=v0.31.0 KIND_SHA256=<sha256 of kind-linux-amd64> scripts/install-kind.sh
set -euo pipefail

readonly PINNED_VERSION=v0.30.0
# sha256 of the v0.30.0 release binaries (github.com/kubernetes-sigs/kind/releases/tag/v0.30.0).
readonly PINNED_SHA256_LINUX_AMD64=517ab7fc89ddeed5fa65abf71530d90648d9638ef0c4cde22c2c11f8097b8889
readonly PINNED_SHA256_LINUX_ARM64=7ea2de9d2d190022ed4a8a4e3ac0636c8a455e460b9a13ccf19f15d07f4f00eb

dest_dir=${1:-.venv/bin}
version=${KIND_VERSION:-$PINNED_VERSION}

die() { printf 'install-kind: %s\n' "$*" >&2; exit 1; }

case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) asset=kind-linux-amd64 pinned_sha256=$PINNED_SHA256_LINUX_AMD64 ;;
  Linux-aarch64 | Linux-arm64) asset=kind-linux-arm64 pinned_sha256=$PINNED_SHA256_LINUX_ARM64 ;;
  *) die "no pinned kind binary for $(uname -s)-$(uname -m); install kind $version yourself" ;;
esac

if [[ "$version" == "$PINNED_VERSION" ]]; then
  sha256=${KIND_SHA256:-$pinned_sha256}
else
  sha256=${KIND_SHA256:?KIND_SHA256 must be given with a KIND_VERSION other than $PINNED_VERSION}
fi

target="$dest_dir/kind"
if [[ -x "$target" ]] && [[ "$(sha256sum "$target" | cut -d ' ' -f 1)" == "$sha256" ]]; then
  echo "install-kind: $target is already kind $version"
  exit 0
fi

mkdir -p "$dest_dir"
partial=$(mktemp "$dest_dir/.kind.XXXXXX")
trap 'rm -f "$partial"' EXIT
url="https://github.com/kubernetes-sigs/kind/releases/download/${version}/${asset}"
echo "install-kind: downloading $url"
curl --fail --silent --show-error --location --retry 3 --output "$partial" "$url"
actual=$(sha256sum "$partial" | cut -d ' ' -f 1)
[[ "$actual" == "$sha256" ]] || die "sha256 mismatch for $url: expected $sha256, got $actual"
chmod 0755 "$partial"
mv "$partial" "$target"
echo "install-kind: installed kind $version at $target"

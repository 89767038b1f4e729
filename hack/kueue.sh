#!/usr/bin/env bash
# Kueue's manager (sigs.k8s.io/kueue, pinned with every dependency in hack/kueue/go.mod and
# go.sum), built once into the cache keyed by its version, for the e2e gang tests.
#
#   hack/kueue.sh build     build the manager into the cache (slow only cold)
#   hack/kueue.sh bin       print the path of the cached manager
#   hack/kueue.sh crds      print the module's CRD directory (config/components/crd/bases)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=hack/lib.sh
source "$here/lib.sh"

KUEUE_VERSION=$(version sigs.k8s.io/kueue "$here/kueue/go.mod")
# Bump RECIPE when the way the manager is built changes, so caches rebuild.
RECIPE=1
KUEUE_DIR="$CACHE_ROOT/kueue/$KUEUE_VERSION-r$RECIPE"

log() { printf 'kueue: %s\n' "$*" >&2; }
die() { printf 'kueue: error: %s\n' "$*" >&2; exit 2; }

# One build at a time per cache (the lock hack/cluster.sh takes too): a second caller waits
# for the first build instead of compiling beside it.
cmd_build() {
  [ -x "$KUEUE_DIR/kueue" ] && { log "manager cached in $KUEUE_DIR"; return 0; }
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
  exec 8>&-
}

cmd_crds() {
  local dir
  dir=$(cd "$here/kueue" && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)
  printf '%s/config/components/crd/bases\n' "$dir"
}

case ${1:-} in
  build) cmd_build ;;
  bin) printf '%s\n' "$KUEUE_DIR/kueue" ;;
  crds) cmd_crds ;;
  *) die "usage: hack/kueue.sh build | bin | crds" ;;
esac

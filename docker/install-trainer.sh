#!/usr/bin/env bash
# Install tflaunch and tf-keras on top of a TensorFlow image without touching its TensorFlow.
#
# The base image already has TensorFlow, and pip must not download it a second time:
#  - TensorFlow's CPU image may ship it as `tensorflow-cpu`, and both the `trainer` extra and
#    tf-keras ask for `tensorflow`, a distribution pip would then install on top. So the wheel
#    goes in without the extra and tf-keras with --no-deps (TensorFlow is its only dependency).
#  - The TensorFlow stack the base came with (numpy, protobuf, keras...) is pinned as a
#    constraint, so the launcher's dependencies cannot move it either.
#  - TensorFlow's GPU images ship cuDNN 8.9, while TensorFlow >= 2.18 loads cuDNN 9
#    (tensorflow/build#221): the GPU variant adds TensorFlow's own `and-cuda` extra, the
#    CUDA/cuDNN wheels this exact release was built against. That extra asks only for ranges
#    (nvidia-cudnn-cu12 >=9.3,<10), so alone each build would take the newest CUDA wheels of
#    its day: the wheels come from the GPU lock (TF_GPU_LOCK, docker/base/
#    requirements-tensorflow-gpu.txt), hash-checked, the versions the offline GPU base has
#    (hack/images.sh), so `make image` and the offline build get the same CUDA.
# It ends by importing everything the trainer needs (matplotlib for curves.png, TensorBoard
# for `tflaunch tensorboard`'s pod), so a broken image fails its build.
#
# Usage: install-trainer.sh WHEEL_DIR
# Environment: VARIANT (gpu|cpu), TF_VERSION, TF_KERAS_VERSION (default TF_VERSION),
#              TF_GPU_LOCK (VARIANT=gpu: the GPU lock), PYTHON (default python).
set -euo pipefail

wheel_dir=${1:?usage: install-trainer.sh WHEEL_DIR}
variant=${VARIANT:?VARIANT must be gpu or cpu}
tf_version=${TF_VERSION:?TF_VERSION must be set}
tf_keras_version=${TF_KERAS_VERSION:-$tf_version}
python=${PYTHON:-python}
pip=("$python" -m pip install --no-cache-dir --no-input --disable-pip-version-check)

die() { printf 'install-trainer: %s\n' "$*" >&2; exit 1; }

case "$variant" in
  gpu | cpu) ;;
  *) die "VARIANT must be gpu or cpu, not '$variant'" ;;
esac
gpu_lock=${TF_GPU_LOCK:-}
[[ $variant == cpu || ( -n $gpu_lock && -f $gpu_lock ) ]] ||
  die "no GPU lock at '$gpu_lock': set TF_GPU_LOCK to docker/base/requirements-tensorflow-gpu.txt"

# Which distribution provides TensorFlow here, and is it the release we pinned?
read -r tf_dist tf_installed < <("$python" - <<'PY'
import importlib.metadata as md

for name in ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tf-nightly", "tf-nightly-cpu"):
    try:
        print(name, md.version(name))
        break
    except md.PackageNotFoundError:
        pass
else:
    print("none", "none")
PY
)
[[ "$tf_installed" == "$tf_version" ]] ||
  die "the base image has TensorFlow '$tf_installed' ($tf_dist), expected $tf_version: change BASE_IMAGE and TF_VERSION together"

workdir=$(mktemp -d)
trap 'rm -rf "$workdir"' EXIT
constraints="$workdir/base-constraints.txt"
"$python" -m pip list --format=freeze --disable-pip-version-check |
  grep -iE '^(tensorflow[a-z_-]*|tf[_-]nightly[a-z_-]*|keras|numpy|protobuf|h5py|ml[_-]dtypes|tensorboard[a-z_-]*|grpcio)==' \
    >"$constraints" || true
echo "install-trainer: keeping the base image's TensorFlow stack:" >&2
sed 's/^/  /' "$constraints" >&2

wheels=("$wheel_dir"/tflaunch-*.whl)
[[ ${#wheels[@]} -eq 1 && -f "${wheels[0]}" ]] || die "expected one tflaunch wheel in $wheel_dir, found: ${wheels[*]}"

# The launcher's own dependencies at the versions the suite ran with (constraints.txt, beside
# the wheels), except the TensorFlow stack, which stays the base image's.
pinned="$workdir/pinned.txt"
if [[ -f "$wheel_dir/constraints.txt" ]]; then
  grep -viE '^(tensorflow[a-z_-]*|tf[_-]nightly[a-z_-]*|tf[_-]keras|keras|numpy|protobuf|h5py|ml[_-]dtypes|tensorboard[a-z_-]*|grpcio|nvidia[a-z0-9_-]*)==' \
    "$wheel_dir/constraints.txt" >"$pinned" || true
else
  die "no constraints.txt in $wheel_dir: copy the repository's beside the wheel"
fi

# The `plot` extra: matplotlib, for the chief's curves.png (numpy stays the base's).
"${pip[@]}" --constraint "$constraints" --constraint "$pinned" "${wheels[0]}[plot]"
"${pip[@]}" --no-deps "tf-keras==${tf_keras_version}"
if [[ "$variant" == gpu ]]; then
  [[ "$tf_dist" == tensorflow ]] || die "the GPU variant needs the 'tensorflow' distribution, the base has '$tf_dist'"
  # Each nvidia-* line of the lock with its --hash line; their dependencies are all nvidia-*.
  awk '/^nvidia-/ {print; getline; print}' "$gpu_lock" >"$workdir/cuda.txt"
  [[ -s "$workdir/cuda.txt" ]] || die "no nvidia-* wheels in $gpu_lock: regenerate it with hack/images.sh lock gpu"
  "${pip[@]}" --require-hashes -r "$workdir/cuda.txt"
  # Now only a check that the extra is satisfied: nothing left for it to download.
  "${pip[@]}" --constraint "$constraints" "tensorflow[and-cuda]==${tf_version}"
fi

# Import what `python -m trainer` imports, with the legacy Keras switch the pods use.
# The GPU variant's TensorFlow must be a CUDA build (seeing a GPU cannot be checked in a build).
TF_USE_LEGACY_KERAS=1 "$python" - "$tf_dist" "$tf_version" "$tf_keras_version" "$variant" <<'PY'
import importlib.metadata as md
import sys

tf_dist, tf_version, tf_keras_version, variant = sys.argv[1:]
import matplotlib
import tensorboard
import tensorflow as tf
import tf_keras

import launcher.core.contract
import trainer

assert md.version(tf_dist) == tf_version, f"{tf_dist} moved to {md.version(tf_dist)}"
assert tf.__version__ == tf_version, f"TensorFlow {tf.__version__}, expected {tf_version}"
assert md.version("tf-keras") == tf_keras_version, md.version("tf-keras")
assert variant == "cpu" or tf.test.is_built_with_cuda(), "VARIANT=gpu, but not a CUDA build"
print(f"install-trainer: TensorFlow {tf.__version__}, tf-keras {tf_keras.__version__}, "
      f"tflaunch {md.version('tflaunch')} ({trainer.__name__}, {launcher.core.contract.__name__})")
PY

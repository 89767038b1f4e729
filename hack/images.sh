#!/usr/bin/env bash
# The trainer and operator images, built on this machine with no image registry, from the
# project's own Dockerfiles (docker/Dockerfile with VARIANT=cpu, or VARIANT=gpu for
# trainer-gpu; docker/Dockerfile.operator).
#
# The bases are made here too: a Debian root filesystem from Debian's packages
# (docker/base/rootfs.sh, debootstrap) with Python in a venv and, for the trainer, TensorFlow
# from PyPI (docker/base/Dockerfile, hash-locked requirements; for trainer-gpu TensorFlow's
# CUDA build with the CUDA and cuDNN wheels of its `and-cuda` extra). They reach the Dockerfiles
# through their existing BASE_IMAGE / PYTHON_IMAGE arguments, so the Dockerfile built here is
# the one users build with Docker. The builder is buildah (Debian's package; RUN --mount and
# unused-stage skipping as BuildKit does), run as root with chroot isolation.
#
# Each image is saved as a docker-archive (`docker save` format), which `docker load`,
# `ctr -n k8s.io images import` and `kind load image-archive` all read, under
# $TFLAUNCH_CACHE/images (default ~/.cache/tflaunch/images), named by a hash of every input that
# changes it: the build context the Dockerfiles see (per /.dockerignore: pyproject.toml,
# README.md, launcher/, trainer/, docker/, including an ignored docker/data/mnist.npz), the
# base recipe, the versions and build arguments. A second build with no input changed finds
# the archives and builds nothing.
#
# trainer-gpu, the image `make image` builds with Docker, is never part of `build all`: its
# CUDA wheels make it about 7 GB (docs/testing.md). Its base (as big) is not kept in the
# storage after its build, and an older GPU archive goes before a new build: a machine that
# built it keeps one archive, not a base and an archive per source tree.
#
# tfjob-example is Kubeflow's TFJob example image, kubeflow/tf-multi-worker-strategy:latest,
# built FROM the trainer image (tests/data/tfjob/Dockerfile) for the real node's registry
# mirror (tests/node/test_tfjob_example.py): its "archive" is an OCI image layout directory
# (uncompressed layers), which the mirror serves as a registry does.
#
#   hack/images.sh build [trainer|trainer-gpu|operator|tfjob-example|all]
#                                                 build what is missing; print "REF ARCHIVE"
#                                                 (all: every image but trainer-gpu)
#   hack/images.sh path IMAGE                     print the archive for the current inputs
#                                                 (exit 1 when it is not built)
#   hack/images.sh ref IMAGE                      print the image reference
#   hack/images.sh run ARCHIVE [-e K=V]... [--name NAME] [--command] [--] [ARG...]
#                                                 run an archive under runc as the pods do;
#                                                 --command: ARGs replace the ENTRYPOINT too,
#                                                 as a pod's `command` does
#   hack/images.sh unbundle ARCHIVE               remove the bundle `run` unpacked it into
#   hack/images.sh kill NAME [SIGNAL]             signal that container's PID 1 (TERM)
#   hack/images.sh smoke                          a few training steps in the trainer archive
#   hack/images.sh lock [pip|cpu|gpu|all]         regenerate docker/base/requirements-*.txt
#   hack/images.sh clean                          remove the cache (archives, rootfs, storage)
#
# Environment: TFLAUNCH_CACHE, TF_VERSION (2.21.0), SUITE (bookworm), MIRROR (the Debian archive
# this machine's apt uses),
# STORAGE_DRIVER (overlay; vfs where overlay cannot mount), BUILD_CA_BUNDLE (below), KEEP_ARCHIVES
# (3) and KEEP_BASES (2) (what stays cached, below), and MNIST,
# MNIST_URL, MNIST_SHA256, MNIST_PYPI_URL (the trainer's build arguments, passed when set).
# Needs root, debootstrap and buildah; `run` and `smoke` need runc, skopeo and umoci.
set -euo pipefail
shopt -s inherit_errexit

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
# shellcheck source=hack/lib.sh
source "$here/lib.sh"

IMAGES_DIR="$CACHE_ROOT/images"
STORAGE_DRIVER=${STORAGE_DRIVER:-overlay}
TF_VERSION=${TF_VERSION:-2.21.0}
SUITE=${SUITE:-bookworm}
MIRROR=${MIRROR:-$("$root/docker/base/apt-mirror.sh")}
# The CA bundle the builds' RUN steps trust (pip, the MNIST download), bind-mounted over the
# image's own for the build only, never committed: this machine's, so that a TLS-intercepting
# proxy it trusts is trusted by the build too. Empty: the image's own Debian bundle.
BUILD_CA_BUNDLE=${BUILD_CA_BUNDLE-/etc/ssl/certs/ca-certificates.crt}
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/pyproject.toml")
# Bump RECIPE when the way the images are assembled here changes, so caches rebuild.
RECIPE=1
CONTEXT_HASH=

TRAINER_REF="tflaunch-trainer:$VERSION-cpu"
# The GPU variant's tag has no suffix, as `make image` tags it (Makefile's TAG).
TRAINER_GPU_REF="tflaunch-trainer:$VERSION"
OPERATOR_REF="tflaunch-operator:$VERSION"
TFJOB_EXAMPLE_REF="docker.io/kubeflow/tf-multi-worker-strategy:latest"
TFJOB_EXAMPLE_CONTEXT="$root/tests/data/tfjob"
IMAGES="trainer, trainer-gpu, operator or tfjob-example"

log() { printf 'images: %s %s\n' "$(date +%T)" "$*" >&2; }
die() { printf 'images: error: %s\n' "$*" >&2; exit 2; }

# Options of every `buildah bud` here: no pulls (nothing is fetched from a registry, a missing
# base fails the build), chroot isolation (root, no user namespaces needed), layer caching.
bud_flags() {
  printf '%s\n' --pull-never --isolation chroot --layers
  [[ -z $BUILD_CA_BUNDLE ]] || printf '%s\n' -v "$BUILD_CA_BUNDLE:/etc/ssl/certs/ca-certificates.crt:ro"
}

buildah_() {
  buildah --root "$IMAGES_DIR/storage/$STORAGE_DRIVER" --runroot "$IMAGES_DIR/run/$STORAGE_DRIVER" \
    --storage-driver "$STORAGE_DRIVER" "$@"
}

need_build_tools() {
  [[ $(id -u) -eq 0 ]] || die "building images needs root (debootstrap, buildah with chroot isolation): run as root"
  local tool missing=()
  for tool in buildah debootstrap; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
  done
  [[ ${#missing[@]} -eq 0 ]] || die "${missing[*]} not found: apt-get install ${missing[*]}"
  # RUN --mount=...,from=STAGE and skipping the stages a target does not use (the Dockerfile's
  # tensorflow/tensorflow bases are never pulled): buildah 1.28 (Debian 12) has both.
  local version
  version=$(buildah --version | awk '{print $3}')
  [[ "$(printf '%s\n' 1.28 "$version" | sort -V | head -1)" == 1.28 ]] ||
    die "buildah $version is too old: the Dockerfiles need buildah >= 1.28 (Debian 12's)"
}

sha() { sha256sum | cut -c1-16; }

# The build context's files as the Dockerfiles see them: /.dockerignore's allowlist (`!PATH`
# lines) minus its `**/NAME` exclusions, with each file's path, mode and content hashed.
context_hash() {
  python3 - "$root" <<'PY'
import fnmatch
import hashlib
import os
import sys

root = sys.argv[1]
includes, excludes = [], []
with open(os.path.join(root, ".dockerignore")) as f:
    for line in f:
        line = line.strip()
        if not line or line.startswith("#") or line == "*":
            continue
        if line.startswith("!"):
            includes.append(line[1:].strip("/"))
        elif line.startswith("**/"):
            excludes.append(line[3:])
        else:
            sys.exit(f"images: .dockerignore line {line!r} is not understood by hack/images.sh")

def excluded(rel):
    return any(fnmatch.fnmatch(part, pat) for part in rel.split("/") for pat in excludes)

files = []
for inc in includes:
    top = os.path.join(root, inc)
    if os.path.isfile(top):
        files.append(inc)
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if not excluded(d))
        for name in filenames:
            rel = os.path.relpath(os.path.join(dirpath, name), root)
            if not excluded(rel):
                files.append(rel)
digest = hashlib.sha256()
for rel in sorted(set(files)):
    path = os.path.join(root, rel)
    digest.update(f"{rel}\0{os.stat(path).st_mode & 0o111:o}\0".encode())
    with open(path, "rb") as f:
        digest.update(hashlib.sha256(f.read()).digest())
print(digest.hexdigest()[:16])
PY
}

# The keys: each names what changes the thing it keys.
rootfs_key() {
  { cat "$root/docker/base/rootfs.sh"; echo "$SUITE $MIRROR ${PACKAGES:-} r$RECIPE"; } | sha
}
# base_key TARGET (python|tensorflow-cpu|tensorflow-gpu): what that base is made of, and only
# that, so that a new CUDA lock does not rebuild the CPU images.
base_key() {
  local target=$1 lock=
  case "$target" in
    python) ;;
    tensorflow-cpu | tensorflow-gpu) lock="$root/docker/base/requirements-$target.txt" ;;
    *) die "unknown base '$target': python, tensorflow-cpu or tensorflow-gpu" ;;
  esac
  { rootfs_key; echo "$target $TF_VERSION"
    cat "$root"/docker/base/Dockerfile "$root"/docker/base/requirements-pip.txt ${lock:+"$lock"}
  } | sha
}
# base_of IMAGE: the base an image is built on (tfjob-example: the CPU trainer's).
base_of() {
  case "$1" in
    trainer | tfjob-example) echo tensorflow-cpu ;;
    trainer-gpu) echo tensorflow-gpu ;;
    operator) echo python ;;
    *) die "unknown image '$1': $IMAGES" ;;
  esac
}
image_key() { # NAME
  # The context's hash is computed once per call of this script (it reads every file).
  [[ -n ${CONTEXT_HASH:-} ]] || CONTEXT_HASH=$(context_hash)
  { echo "$1 $VERSION $TF_VERSION r$RECIPE"
    echo "${MNIST:-} ${MNIST_URL:-} ${MNIST_SHA256:-} ${MNIST_PYPI_URL:-}"
    base_key "$(base_of "$1")"
    echo "$CONTEXT_HASH"
    # The example adds its own context to the trainer's inputs (its base).
    [[ $1 != tfjob-example ]] ||
      cat "$TFJOB_EXAMPLE_CONTEXT/Dockerfile" "$TFJOB_EXAMPLE_CONTEXT/multi_worker_strategy-with-keras.py"
  } | sha
}
archive_for() { # IMAGE
  case "$1" in
    trainer) echo "$IMAGES_DIR/tflaunch-trainer-$VERSION-cpu-$(image_key trainer).tar" ;;
    trainer-gpu) echo "$IMAGES_DIR/tflaunch-trainer-$VERSION-gpu-$(image_key trainer-gpu).tar" ;;
    operator) echo "$IMAGES_DIR/tflaunch-operator-$VERSION-$(image_key operator).tar" ;;
    tfjob-example) echo "$IMAGES_DIR/tf-multi-worker-strategy-$(image_key tfjob-example).oci" ;;
    *) die "unknown image '$1': $IMAGES" ;;
  esac
}
ref_for() {
  case "$1" in
    trainer) echo "$TRAINER_REF" ;;
    trainer-gpu) echo "$TRAINER_GPU_REF" ;;
    operator) echo "$OPERATOR_REF" ;;
    tfjob-example) echo "$TFJOB_EXAMPLE_REF" ;;
    *) die "unknown image '$1': $IMAGES" ;;
  esac
}

ensure_rootfs() {
  local out
  out="$IMAGES_DIR/rootfs/debian-$SUITE-$(rootfs_key).tar"
  if [[ ! -f "$out" ]]; then
    mkdir -p "$(dirname "$out")"
    SUITE=$SUITE MIRROR=$MIRROR "$root/docker/base/rootfs.sh" "$out"
  fi
  echo "$out"
}

# ensure_base TARGET: the base image TARGET (python|tensorflow-cpu|tensorflow-gpu) in buildah's
# storage, tagged by its base key; printed as its local reference.
ensure_base() {
  local target=$1 key ref ctx rootfs flags
  key=$(base_key "$target")
  ref="localhost/tflaunch-base:$target-$key"
  if ! buildah_ inspect --type image "$ref" >/dev/null 2>&1; then
    rootfs=$(ensure_rootfs)
    ctx=$(mktemp -d "$IMAGES_DIR/base-context.XXXXXX")
    cp "$root"/docker/base/Dockerfile "$root"/docker/base/requirements-*.txt "$ctx/"
    ln "$rootfs" "$ctx/rootfs.tar" 2>/dev/null || cp "$rootfs" "$ctx/rootfs.tar"
    log "building the base $ref"
    mapfile -t flags < <(bud_flags)
    buildah_ bud "${flags[@]}" --target "$target" \
      --build-arg TF_VERSION="$TF_VERSION" \
      --label org.opencontainers.image.title="tflaunch-base-$target" \
      --label dev.tflaunch.base-recipe="$key" \
      -f "$ctx/Dockerfile" -t "$ref" "$ctx" >&2
    rm -rf "$ctx"
  fi
  echo "$ref"
}

# The storage keeps the CPU bases (python, tensorflow-cpu) of this tree's base keys and the
# newest others, KEEP_BASES per base in all (default 2): two checkouts of different sources (a
# CI clone beside a work tree) must not throw away each other's base at every build. Nothing
# else stays: the images built before are in their archives, and a rebuild re-runs the steps
# after the base. The GPU base (about 7 GB) is never kept: trainer-gpu is built by hand,
# rarely, and installing its wheels again costs minutes where keeping it would cost every
# build machine its disk.
prune_storage() {
  local keep=" " target own ref
  for target in python tensorflow-cpu; do
    own="localhost/tflaunch-base:$target-$(base_key "$target")"
    keep+="$own "
    while read -r ref; do
      keep+="$ref "
    done < <(buildah_ images --noheading --format '{{.CreatedAtRaw}} {{.Name}}:{{.Tag}}' 2>/dev/null |
      sort -r | awk -v p="localhost/tflaunch-base:$target-" -v own="$own" \
        'index($NF, p) == 1 && $NF != own {print $NF}' |
      head -n "$((${KEEP_BASES:-2} - 1))" || true)
  done
  while read -r ref; do
    [[ "$keep" == *" $ref "* ]] || buildah_ rmi --force "$ref" >/dev/null 2>&1 || true
  done < <(buildah_ images --format '{{.Name}}:{{.Tag}}' --noheading 2>/dev/null | grep -v '<none>' || true)
  buildah_ rm --all >/dev/null 2>&1 || true
  buildah_ rmi --prune >/dev/null 2>&1 || true
}

revision() {
  local rev
  rev=$(git -C "$root" rev-parse HEAD 2>/dev/null) || { echo unknown; return; }
  [[ -z $(git -C "$root" status --porcelain 2>/dev/null) ]] || rev="$rev-dirty"
  echo "$rev"
}

# build_tfjob_example: Kubeflow's example image FROM the trainer image (built first if missing,
# and taken back into buildah's storage from its archive, which prune_storage left it in),
# pushed as an OCI layout directory with uncompressed layers (they only cross this machine).
build_tfjob_example() {
  local archive=$1 trainer_archive trainer args tmp
  trainer_archive=$(archive_for trainer)
  [[ -f "$trainer_archive" ]] || build_one trainer >/dev/null
  trainer="docker.io/library/$TRAINER_REF"
  buildah_ inspect --type image "$trainer" >/dev/null 2>&1 ||
    buildah_ pull --quiet "docker-archive:$trainer_archive" >&2
  mapfile -t args < <(bud_flags)
  log "building $TFJOB_EXAMPLE_REF FROM $trainer"
  buildah_ bud "${args[@]}" --build-arg TRAINER_IMAGE="$trainer" -t "$TFJOB_EXAMPLE_REF" \
    -f "$TFJOB_EXAMPLE_CONTEXT/Dockerfile" "$TFJOB_EXAMPLE_CONTEXT" >&2
  tmp="$archive.partial"
  rm -rf "$tmp"
  buildah_ push --quiet --disable-compression "$TFJOB_EXAMPLE_REF" "oci:$tmp:latest" >&2
  mv "$tmp" "$archive"
  local old
  while read -r old; do
    rm -rf "$old"
  done < <(find "$IMAGES_DIR" -maxdepth 1 -name 'tf-multi-worker-strategy-*.oci' -printf '%T@ %p\n' |
    sort -rn | tail -n +"$((${KEEP_ARCHIVES:-3} + 1))" | cut -d' ' -f2-)
  prune_storage
  log "$TFJOB_EXAMPLE_REF: built ($archive, $(du -sh "$archive" | cut -f1))"
}

# drop_archives ARCHIVE KEEP: remove all but the newest KEEP archives of ARCHIVE's image (other
# inputs' builds) and the bundles `run` unpacked them into.
drop_archives() {
  local archive=$1 keep=$2 old
  while read -r old; do
    rm -rf "$old" "$IMAGES_DIR/bundles/$(basename "${old%.tar}")"
  done < <(find "$IMAGES_DIR" -maxdepth 1 -name "$(basename "${archive%-*}")-*.tar" -printf '%T@ %p\n' |
    sort -rn | tail -n +"$((keep + 1))" | cut -d' ' -f2-)
}

# build_one IMAGE: build the image unless its archive exists; print "REF ARCHIVE".
build_one() {
  local name=$1 archive ref base tmp
  archive=$(archive_for "$name")
  ref=$(ref_for "$name")
  if [[ -e "$archive" ]]; then
    log "$ref: cached ($archive)"
    echo "$ref $archive"
    return
  fi
  if [[ $name == tfjob-example ]]; then
    build_tfjob_example "$archive"
    echo "$ref $archive"
    return
  fi
  local args variant
  mapfile -t args < <(bud_flags)
  args+=(--build-arg VERSION="$VERSION"
    --build-arg REVISION="$(revision)" -t "docker.io/library/$ref")
  case "$name" in
    trainer | trainer-gpu)
      variant=cpu
      if [[ $name == trainer-gpu ]]; then
        variant=gpu
        # An older GPU archive (about 7 GB, and as much again for a bundle) is room this
        # build needs: it goes first (another checkout rebuilds its own, by hand, as this one
        # does).
        drop_archives "$archive" 0
      fi
      base=$(ensure_base "$(base_of "$name")")
      args+=(-f docker/Dockerfile --build-arg VARIANT="$variant" --build-arg TF_VERSION="$TF_VERSION"
        --build-arg BASE_IMAGE="$base")
      local arg
      for arg in MNIST MNIST_URL MNIST_SHA256 MNIST_PYPI_URL; do
        [[ -z ${!arg:-} ]] || args+=(--build-arg "$arg=${!arg}")
      done
      ;;
    operator)
      base=$(ensure_base python)
      args+=(-f docker/Dockerfile.operator --build-arg PYTHON_IMAGE="$base")
      ;;
  esac
  log "building $ref from ${args[*]}"
  (cd "$root" && buildah_ bud "${args[@]}" .) >&2
  tmp="$archive.partial"
  rm -f "$tmp"
  # Named as Docker and containerd name `image: tflaunch-trainer:...` in a pod spec.
  buildah_ push --quiet "docker.io/library/$ref" "docker-archive:$tmp:docker.io/library/$ref" >&2
  mv "$tmp" "$archive"
  # Keep the newest KEEP_ARCHIVES archives per image (default 3): older inputs' archives are
  # of no further use, but two checkouts of different sources (a CI clone beside a work
  # tree) must not delete each other's archive between its build and its tests.
  drop_archives "$archive" "${KEEP_ARCHIVES:-3}"
  prune_storage
  log "$ref: built ($archive, $(du -h "$archive" | cut -f1))"
  echo "$ref $archive"
}

cmd_build() {
  local which=${1:-all} name
  need_build_tools
  CONTEXT_HASH=$(context_hash)
  mkdir -p "$IMAGES_DIR"
  exec 9>"$IMAGES_DIR/.lock"
  flock 9
  case "$which" in
    all)
      # Both bases first, while the python stage's layers are still cached for the second.
      if [[ ! -f $(archive_for trainer) || ! -f $(archive_for operator) ]]; then
        ensure_base python >/dev/null
        ensure_base tensorflow-cpu >/dev/null
      fi
      for name in trainer operator tfjob-example; do build_one "$name"; done
      ;;
    trainer | trainer-gpu | operator | tfjob-example) build_one "$which" ;;
    *) die "unknown image '$which': $IMAGES, or all" ;;
  esac
}

cmd_path() {
  local archive
  archive=$(archive_for "${1:?usage: images.sh path IMAGE ($IMAGES)}")
  echo "$archive"
  [[ -e "$archive" ]] || { log "not built for the current inputs: hack/images.sh build ${1}"; exit 1; }
}

# The requirement locks of docker/base/Dockerfile, regenerated from PyPI: the wheels pip picks
# for CPython 3.11 on x86-64 Linux (Debian 12's Python), each with its sha256 as the index
# gives it. pip resolves without installing (--dry-run --report), reading each wheel's metadata
# with HTTP range requests (fast-deps), so the GPU lock does not download 3 GB of CUDA wheels.
# The GPU lock is resolved with the CPU lock's versions as constraints: the GPU image has the
# CPU image's Python packages, with TensorFlow's CUDA build in place of tensorflow-cpu and the
# CUDA and cuDNN wheels of its `and-cuda` extra (which asks only for ranges, so the lock is what
# holds them still).
cmd_lock() {
  local which=${1:-all} dl
  case "$which" in
    pip | cpu | gpu | all) ;;
    *) die "unknown lock '$which': pip, cpu, gpu or all" ;;
  esac
  dl=$(mktemp -d)
  # shellcheck disable=SC2064
  trap "rm -rf '$dl'" EXIT
  write_lock() { # OUT REQUIREMENT... (with $constraints, when set, as pip's constraints)
    local out=$1
    shift
    python3 -m pip install --quiet --disable-pip-version-check --dry-run --ignore-installed \
      --report "$dl/report.json" --target "$dl/target" --use-feature=fast-deps \
      --only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 \
      --platform manylinux_2_36_x86_64 --platform manylinux_2_28_x86_64 \
      --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 --platform manylinux2010_x86_64 \
      --platform manylinux1_x86_64 --platform linux_x86_64 \
      ${constraints:+--constraint "$constraints"} "$@" 2> >(grep -v 'fast-deps' >&2)
    python3 - "$dl/report.json" "$*${constraints:+, constrained by $(basename "$constraint_source")}" \
      >"$out.partial" <<'PY'
import json
import re
import sys

print(f"# Generated by `hack/images.sh lock` from: {sys.argv[2]}")
print("# Wheels for CPython 3.11 on x86-64 Linux (Debian 12), each with its sha256.")
found = []
for item in json.load(open(sys.argv[1]))["install"]:
    name = re.sub(r"[-_.]+", "-", item["metadata"]["name"]).lower()
    digest = item["download_info"].get("archive_info", {}).get("hashes", {}).get("sha256")
    if not digest:
        sys.exit(f"images: the index gave no sha256 for {name}: cannot lock it")
    found.append((name, item["metadata"]["version"], digest))
for name, version, digest in sorted(found):
    print(f"{name}=={version} \\\n    --hash=sha256:{digest}")
PY
    mv "$out.partial" "$out"
    log "wrote $out"
  }
  local base="$root/docker/base" constraints="" constraint_source=""
  [[ $which != pip && $which != all ]] || write_lock "$base/requirements-pip.txt" pip
  [[ $which != cpu && $which != all ]] ||
    write_lock "$base/requirements-tensorflow-cpu.txt" "tensorflow-cpu==$TF_VERSION" "tensorboard==$TF_VERSION"
  if [[ $which == gpu || $which == all ]]; then
    constraint_source="$base/requirements-tensorflow-cpu.txt"
    constraints="$dl/cpu-versions.txt"
    sed -n 's/^\([a-z0-9-]*==[^ ]*\) .*/\1/p' "$constraint_source" | grep -v '^tensorflow-cpu==' >"$constraints"
    write_lock "$base/requirements-tensorflow-gpu.txt" \
      "tensorflow[and-cuda]==$TF_VERSION" "tensorboard==$TF_VERSION"
  fi
}

# cmd_run ARCHIVE [-e KEY=VALUE]... [--name NAME] [--command] [--] [ARG...]: run the image in
# ARCHIVE under runc (container NAME, for `kill`) as the
# pods run it (no node, no registry): its ENTRYPOINT with ARGs in place of its CMD (as
# `docker run IMAGE ARG...`), or with --command ARGs alone (a pod's `command`), as its USER, on a read-only root filesystem with /tmp and
# /checkpoints as fresh tmpfs (the pods' emptyDirs), every capability dropped, no new
# privileges, own PID, network (loopback only), IPC, UTS and mount namespaces. The image is
# unpacked once per archive (skopeo to an OCI layout, umoci to a bundle, the image config
# beside it); each run gets its own config.json next to that shared rootfs. Exits with the
# container's status.
cmd_run() {
  local archive=${1:?usage: images.sh run ARCHIVE [-e KEY=VALUE]... [--name NAME] [--command] [--] [ARG...]}
  shift
  local env=() name="" mode=cmd
  while [[ $# -gt 0 ]]; do
    case "$1" in
      -e) env+=("${2:?-e needs KEY=VALUE}"); shift 2 ;;
      --name) name=${2:?--name needs a container name}; shift 2 ;;
      --command) mode="command"; shift ;;
      --) shift; break ;;
      *) break ;;
    esac
  done
  [[ $(id -u) -eq 0 ]] || die "runc needs root here: run as root"
  local tool
  for tool in runc skopeo umoci; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool not found: apt-get install $tool"
  done
  [[ -f "$archive" ]] || die "no image archive at $archive: hack/images.sh build"
  local unpacked
  unpacked=$(bundle_of "$archive")
  mkdir -p "$IMAGES_DIR/bundles"
  (
    flock 8
    if [[ ! -d "$unpacked/rootfs" ]]; then
      rm -rf "$unpacked" "$unpacked.oci" "$unpacked.partial"
      log "unpacking $archive into $unpacked"
      skopeo copy --quiet "docker-archive:$archive" "oci:$unpacked.oci:image" >&2
      umoci unpack --image "$unpacked.oci:image" "$unpacked.partial" >&2
      skopeo inspect --config "oci:$unpacked.oci:image" >"$unpacked.partial/image-config.json"
      rm -rf "$unpacked.oci"
      mv "$unpacked.partial" "$unpacked"
    fi
  ) 8>"$IMAGES_DIR/bundles/.lock"
  local run_dir id status=0
  run_dir=$(mktemp -d "$IMAGES_DIR/bundles/run.XXXXXX")
  id=${name:-tflaunch-${run_dir##*.}}
  python3 "$here/oci_config.py" "$unpacked" "$run_dir/config.json" "$mode" "${#env[@]}" "${env[@]}" "$@"
  runc --root "$IMAGES_DIR/runc" run --bundle "$run_dir" "$id" </dev/null || status=$?
  runc --root "$IMAGES_DIR/runc" delete --force "$id" >/dev/null 2>&1 || true
  rm -rf "$run_dir"
  return "$status"
}

bundle_of() { echo "$IMAGES_DIR/bundles/$(basename "${1%.tar}")"; }

# cmd_unbundle ARCHIVE: remove the bundle `run` unpacked ARCHIVE into (the archive stays). The
# GPU image's bundle is about 7 GB: its tests drop it when they are done.
cmd_unbundle() {
  local archive=${1:?usage: images.sh unbundle ARCHIVE}
  [[ -f "$archive" ]] || die "no image archive at $archive: hack/images.sh path IMAGE names it"
  mkdir -p "$IMAGES_DIR/bundles"
  (
    flock 8
    rm -rf "$(bundle_of "$archive")"
  ) 8>"$IMAGES_DIR/bundles/.lock"
}

# The trainer image's smoke run: the wrapper as PID 1 starts the built-in trainer for a few
# steps on the baked data, TF_CONFIG unset (one worker).
cmd_smoke() {
  local archive
  archive=$(cmd_path trainer)
  cmd_run "$archive" -- python -m trainer --epochs 1 --steps-per-epoch 5 \
    --max-train-examples 2560 --max-test-examples 512 --checkpoint-dir /checkpoints
}

case "${1:-}" in
  build) shift; cmd_build "$@" ;;
  path) shift; cmd_path "$@" ;;
  ref) shift; ref_for "${1:?usage: images.sh ref IMAGE ($IMAGES)}" ;;
  lock) shift; cmd_lock "$@" ;;
  run) shift; cmd_run "$@" ;;
  unbundle) shift; cmd_unbundle "$@" ;;
  kill)
    shift
    runc --root "$IMAGES_DIR/runc" kill "${1:?usage: images.sh kill NAME [SIGNAL]}" "${2:-TERM}"
    ;;
  smoke) cmd_smoke ;;
  clean)
    [[ ! -d "$IMAGES_DIR/storage" ]] || buildah_ rm --all >/dev/null 2>&1 || true
    for d in "$IMAGES_DIR"/storage/*/overlay; do [[ -d $d ]] && umount -R "$d"/*/merged 2>/dev/null || true; done
    rm -rf "$IMAGES_DIR"
    log "removed $IMAGES_DIR"
    ;;
  *)
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac

#!/usr/bin/env bash
# `make kind-rig-test`: this machine's kind rig end to end, what a newcomer runs once: the rig
# up (hack/kind.sh up), the offline images pushed to its registry, `make kind-test` and
# `make kind-operator-test` on it, the tests/kind suite (pull errors, pull secrets, a node
# stopped), and the rig down again, also when a step fails. Prints each step's time.
# Environment: PYTEST (the venv's pytest); PYTEST_ARGS, extra pytest arguments.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTEST=${PYTEST:-.venv/bin/pytest}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
registry=localhost:5001
trainer=$registry/tflaunch-trainer:$version-cpu

step() { # NAME COMMAND...: run it, say how long it took
  local name=$1 start=$SECONDS
  shift
  printf 'kind-rig-test: %s\n' "$name" >&2
  "$@"
  printf 'kind-rig-test: %s took %d s\n' "$name" "$((SECONDS - start))" >&2
}

begin=$SECONDS
passed=false
finish() {
  local status=$?
  step down hack/kind.sh down || status=1
  if [ "$passed" = true ] && [ "$status" = 0 ]; then
    printf 'kind-rig-test: passed in %d s\n' "$((SECONDS - begin))" >&2
  else
    printf 'kind-rig-test: FAILED (exit %d) after %d s\n' "$status" "$((SECONDS - begin))" >&2
    [ "$status" != 0 ] || status=1
  fi
  exit "$status"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
step up hack/kind.sh up
step push hack/kind.sh push >/dev/null
step kind-test make kind-test KIND=hack/kind/bin/kind KIND_IMAGE="$trainer"
step kind-operator-test make kind-operator-test KIND=hack/kind/bin/kind KIND_IMAGE="$trainer" \
  OPERATOR_IMAGE=$registry/tflaunch-operator
# shellcheck disable=SC2086  # PYTEST_ARGS: words
step tests/kind env TFLAUNCH_REQUIRE_KIND=1 "$PYTEST" -p no:randomly -q ${PYTEST_ARGS:-} tests/kind
passed=true

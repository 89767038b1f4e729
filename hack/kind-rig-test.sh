#!/usr/bin/env bash
# `make kind-rig-test`: this machine's kind rig end to end, what a newcomer runs once: the rig
# up (hack/kind.sh up), the offline images pushed to its registry, the tests/kind suite
# (`make kind-test` and `make kind-operator-test` as a user runs them, across nodes, pull
# errors, pull secrets, NetworkPolicy, a node stopped), and the rig down again, also when a
# step fails. Prints each step's time.
# Environment: PYTEST (the venv's pytest); PYTEST_ARGS, extra pytest arguments.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTEST=${PYTEST:-.venv/bin/pytest}

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
# shellcheck disable=SC2086  # PYTEST_ARGS: words
step tests/kind env TFLAUNCH_REQUIRE_KIND=1 "$PYTEST" -p no:randomly -q --durations=0 ${PYTEST_ARGS:-} tests/kind
passed=true

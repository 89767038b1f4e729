# shellcheck shell=bash
# What scripts/kind-test.sh and scripts/kind-operator-test.sh share; sourced by both.

# save_job_diagnostics KUBECTL NAMESPACE SELECTOR ARTIFACTS
# The namespace's events, `describe` of its Jobs and pods, and the log of every pod that
# SELECTOR matches, into the directory ARTIFACTS. Run from a failure's cleanup: never fails.
save_job_diagnostics() {
  local kubectl=$1 namespace=$2 selector=$3 artifacts=$4 pod
  "$kubectl" get events -n "$namespace" --sort-by=.lastTimestamp >"$artifacts/events.txt" 2>&1
  "$kubectl" describe jobs,pods -n "$namespace" >"$artifacts/describe.txt" 2>&1
  while read -r pod; do
    [[ -n "$pod" ]] || continue
    "$kubectl" logs -n "$namespace" "$pod" --all-containers --tail=-1 >"$artifacts/${pod#pod/}.log" 2>&1
  done < <("$kubectl" get pods -n "$namespace" -l "$selector" -o name 2>/dev/null)
}

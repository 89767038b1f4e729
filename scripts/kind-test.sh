#!/usr/bin/env bash
# End-to-end test on a kind cluster: train MNIST on CPU workers and check the result.
#
# Submits examples/mnist.yaml with the image `make kind-load` put into the cluster (or a
# registry's reference the nodes pull), one worker per node (a required pod anti-affinity),
# waits for the job, checks that Kubernetes marks it Complete, that the workers ran on
# WORKERS different nodes (spec.nodeName), and looks for the chief's result line
# (launcher.core.contract.RESULT_LINE_PREFIX, then JSON) in worker 0's logs. Whatever happens, the
# job and the namespace it created are deleted on exit; on a failure, what is needed to debug
# is saved into ARTIFACTS first.
#
# It talks to the kind cluster through a kubeconfig of its own (`kind get kubeconfig`), so the
# current kubectl context never matters, and a job never lands on another cluster.
#
# Run by `make kind-test`; every setting is an environment variable:
#   IMAGE      the trainer image, already loaded into the cluster (required)
#   CLUSTER    kind cluster name (tflaunch)       NAME       tflaunch job name (mnist-e2e)
#   NAMESPACE  created if absent (tflaunch-e2e)   WORKERS    number of workers (2)
#   SPEC       job spec (examples/mnist.yaml)     TIMEOUT    seconds for `tflaunch wait` (1500)
#   ARTIFACTS  where logs are written (build/kind-test)
#   KIND, KUBECTL, TFLAUNCH, PYTHON   the tools (default: kind, kubectl, tflaunch, python3)
# Exit status: 0 passed, 3 the job failed, 4 it timed out, anything else another failure.
set -euo pipefail
# shellcheck source=scripts/kind-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/kind-lib.sh"

IMAGE=${IMAGE:?IMAGE must name the trainer image loaded into the kind cluster}
CLUSTER=${CLUSTER:-tflaunch}
NAME=${NAME:-mnist-e2e}
NAMESPACE=${NAMESPACE:-tflaunch-e2e}
WORKERS=${WORKERS:-2}
SPEC=${SPEC:-examples/mnist.yaml}
TIMEOUT=${TIMEOUT:-1500}
ARTIFACTS=${ARTIFACTS:-build/kind-test}
KIND=${KIND:-kind}
KUBECTL=${KUBECTL:-kubectl}
TFLAUNCH=${TFLAUNCH:-tflaunch}
PYTHON=${PYTHON:-python3}

log() { printf 'kind-test: %s\n' "$*" >&2; }

# The marker comes from the contract module the trainer prints it with: one source of truth.
result_prefix=$("$PYTHON" -c 'from launcher.core.contract import RESULT_LINE_PREFIX as p; print(p, end="")')
worker0_selector="batch.kubernetes.io/job-completion-index=0,tflaunch.dev/job-name=${NAME}"
job_selector="tflaunch.dev/job-name=${NAME}"

mkdir -p "$ARTIFACTS"
workdir=$(mktemp -d)
created_namespace=false
submitted=false

collect_diagnostics() {
  log "saving diagnostics to $ARTIFACTS"
  "$TFLAUNCH" status "$NAME" -n "$NAMESPACE" >"$ARTIFACTS/status.txt" 2>&1
  "$KUBECTL" get jobs,pods,services,networkpolicies -n "$NAMESPACE" -o wide >"$ARTIFACTS/objects.txt" 2>&1
  save_job_diagnostics "$KUBECTL" "$NAMESPACE" "$job_selector" "$ARTIFACTS"
}

cleanup() {
  local status=$?
  trap - EXIT
  set +e
  if ((status != 0)); then
    log "FAILED (exit $status)"
    collect_diagnostics
  fi
  if [[ "$submitted" == true ]]; then
    "$TFLAUNCH" delete "$NAME" -n "$NAMESPACE" || log "warning: tflaunch delete $NAME failed"
  fi
  if [[ "$created_namespace" == true ]]; then
    "$KUBECTL" delete namespace "$NAMESPACE" --ignore-not-found --wait=false
  fi
  rm -rf "$workdir"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

export KUBECONFIG="$workdir/kubeconfig"
"$KIND" get kubeconfig --name "$CLUSTER" >"$KUBECONFIG"

if ! "$KUBECTL" get namespace "$NAMESPACE" >/dev/null 2>&1; then
  "$KUBECTL" create namespace "$NAMESPACE"
  created_namespace=true
fi

# One worker per node: the group's TF_CONFIG hosts, rendezvous and all-reduce then cross
# the pod network between nodes (checked below on the pods' spec.nodeName).
spread_spec="$workdir/spec.yaml"
"$PYTHON" - "$SPEC" "$NAME" "$spread_spec" <<'PY'
import sys, yaml
spec_path, name, out = sys.argv[1:]
doc = yaml.safe_load(open(spec_path))
doc["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
    "labelSelector": {"matchLabels": {"tflaunch.dev/job-name": name}},
    "topologyKey": "kubernetes.io/hostname"}]}}
yaml.safe_dump(doc, open(out, "w"), sort_keys=False)
PY

log "submitting $NAME: $WORKERS CPU workers on different nodes, image $IMAGE, namespace $NAMESPACE of kind-$CLUSTER"
submitted=true
"$TFLAUNCH" submit "$spread_spec" --name "$NAME" -n "$NAMESPACE" --image "$IMAGE" \
  --workers "$WORKERS" --gpus 0 --set spec.imagePullPolicy=IfNotPresent

wait_status=0
"$TFLAUNCH" wait "$NAME" -n "$NAMESPACE" --timeout "$TIMEOUT" || wait_status=$?
case "$wait_status" in
  0) log "tflaunch wait: succeeded" ;;
  3) log "tflaunch wait: the job failed" && exit 3 ;;
  4) log "tflaunch wait: timed out after ${TIMEOUT}s" && exit 4 ;;
  *) log "tflaunch wait exited $wait_status" && exit "$wait_status" ;;
esac

# Kubernetes' own word, independent of tflaunch's reading of it.
"$KUBECTL" wait --for=condition=Complete job -l "$job_selector" -n "$NAMESPACE" --timeout=60s

nodes=$("$KUBECTL" get pods -n "$NAMESPACE" -l "$job_selector" --field-selector=status.phase=Succeeded \
  -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | sort -u)
log "the workers ran on: $(printf '%s' "$nodes" | paste -sd' ')"
if (($(printf '%s\n' "$nodes" | grep -c .) < WORKERS)); then
  log "$WORKERS workers but only $(printf '%s\n' "$nodes" | grep -c .) node(s): they did not train across nodes"
  exit 1
fi

worker0_log="$ARTIFACTS/worker-0.log"
"$KUBECTL" logs -n "$NAMESPACE" -l "$worker0_selector" --all-containers --tail=-1 >"$worker0_log"
if ! result_line=$(awk -v prefix="$result_prefix" \
  'index($0, prefix) == 1 { line = $0 } END { if (line == "") exit 1; print line }' "$worker0_log"); then
  log "no line starting with '${result_prefix}' in worker 0's logs; their end:"
  tail -n 40 "$worker0_log" >&2
  exit 1
fi
log "chief's result: $result_line"
if ! printf '%s' "${result_line#"$result_prefix"}" | "$PYTHON" -c 'import json, sys; json.load(sys.stdin)'; then
  log "the result line is not '${result_prefix}' followed by JSON"
  exit 1
fi
log "passed"

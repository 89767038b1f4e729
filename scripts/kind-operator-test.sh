#!/usr/bin/env bash
# End-to-end test of operator mode on a kind cluster: the operator trains MNIST on CPU workers.
#
# Installs the CRD and the operator (kubectl apply -f manifests/operator/) with the operator
# image `make kind-load-operator` put into the cluster, waits for its rollout, then applies a
# MultiWorkerJob made from SPEC (the trainer image `make kind-load` loaded, imagePullPolicy
# IfNotPresent, WORKERS workers, EPOCHS epochs) and waits until its phase is Succeeded, giving
# up at once when it is Failed. It checks that the status carries the chief's test accuracy,
# deletes the MultiWorkerJob and checks that its Jobs, pods, Service and NetworkPolicy follow
# (they are owned by it). Whatever happens, the MultiWorkerJob, the namespace it created and
# the operator are removed on exit; on a failure, what is needed to debug is saved into
# ARTIFACTS first. Builds nothing.
#
# It talks to the kind cluster through a kubeconfig of its own (`kind get kubeconfig`), so the
# current kubectl context never matters. The operator is removed on exit even if it was
# installed before: run it on a kind cluster kept for tests.
#
# Run by `make kind-operator-test`; every setting is an environment variable:
#   IMAGE           the trainer image, already loaded into the cluster (required)
#   OPERATOR_IMAGE  the operator image, already loaded into the cluster (required)
#   CLUSTER    kind cluster name (tflaunch)       NAME       MultiWorkerJob name (mnist-e2e)
#   NAMESPACE  created if absent (tflaunch-operator-e2e)
#   WORKERS    number of workers (2)              EPOCHS     training epochs (1)
#   SPEC       job spec (examples/mnist.yaml)     TIMEOUT    seconds until Succeeded (900)
#   POLL       seconds between looks at the phase while waiting (15)
#   DELETE_TIMEOUT  seconds for the owned objects to be gone after the delete (120)
#   ARTIFACTS  where logs are written (build/kind-test/operator)
#   KIND, KUBECTL, PYTHON   the tools (default: kind, kubectl, python3; PYTHON imports launcher)
# Exit status: 0 passed, 3 the job failed, 4 it timed out, anything else another failure.
set -euo pipefail
# shellcheck source=scripts/kind-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/kind-lib.sh"

IMAGE=${IMAGE:?IMAGE must name the trainer image loaded into the kind cluster}
OPERATOR_IMAGE=${OPERATOR_IMAGE:?OPERATOR_IMAGE must name the operator image loaded into the kind cluster}
CLUSTER=${CLUSTER:-tflaunch}
NAME=${NAME:-mnist-e2e}
NAMESPACE=${NAMESPACE:-tflaunch-operator-e2e}
WORKERS=${WORKERS:-2}
EPOCHS=${EPOCHS:-1}
SPEC=${SPEC:-examples/mnist.yaml}
TIMEOUT=${TIMEOUT:-900}
POLL=${POLL:-15}
DELETE_TIMEOUT=${DELETE_TIMEOUT:-120}
ARTIFACTS=${ARTIFACTS:-build/kind-test/operator}
KIND=${KIND:-kind}
KUBECTL=${KUBECTL:-kubectl}
PYTHON=${PYTHON:-python3}

# What manifests/operator/ installs (tests/infra checks these against the manifests).
readonly MANIFESTS=manifests/operator/
readonly CRD=multiworkerjobs.tflaunch.dev
readonly OPERATOR_NAMESPACE=tflaunch-system
readonly OPERATOR_DEPLOYMENT=deployment/tflaunch-operator
readonly OPERATOR_CONTAINER=operator
# What the operator creates for a MultiWorkerJob, all labelled with its name.
readonly OWNED=jobs,pods,services,networkpolicies
job_selector="tflaunch.dev/job-name=${NAME}"

log() { printf 'kind-operator-test: %s\n' "$*" >&2; }

mkdir -p "$ARTIFACTS"
workdir=$(mktemp -d)
# Set before any kubectl call, the cleanup's included: nothing here reaches another cluster.
export KUBECONFIG="$workdir/kubeconfig"
connected=false
operator_applied=false
created_namespace=false
job_applied=false

collect_diagnostics() {
  log "saving diagnostics to $ARTIFACTS"
  "$KUBECTL" get mwj "$NAME" -n "$NAMESPACE" -o yaml >"$ARTIFACTS/multiworkerjob-status.yaml" 2>&1
  "$KUBECTL" describe mwj "$NAME" -n "$NAMESPACE" >"$ARTIFACTS/describe-multiworkerjob.txt" 2>&1
  "$KUBECTL" get "$OWNED" -n "$NAMESPACE" -o wide >"$ARTIFACTS/objects.txt" 2>&1
  save_job_diagnostics "$KUBECTL" "$NAMESPACE" "$job_selector" "$ARTIFACTS"
  "$KUBECTL" logs -n "$OPERATOR_NAMESPACE" "$OPERATOR_DEPLOYMENT" --all-containers --tail=-1 \
    >"$ARTIFACTS/operator.log" 2>&1
  "$KUBECTL" logs -n "$OPERATOR_NAMESPACE" "$OPERATOR_DEPLOYMENT" --all-containers --tail=-1 \
    --previous >"$ARTIFACTS/operator-previous.log" 2>&1
  "$KUBECTL" describe deployments,pods -n "$OPERATOR_NAMESPACE" >"$ARTIFACTS/describe-operator.txt" 2>&1
  "$KUBECTL" get events -n "$OPERATOR_NAMESPACE" --sort-by=.lastTimestamp \
    >"$ARTIFACTS/operator-events.txt" 2>&1
}

cleanup() {
  local status=$?
  trap - EXIT
  set +e
  if ((status != 0)); then
    log "FAILED (exit $status)"
    [[ "$connected" == true ]] && collect_diagnostics
  fi
  if [[ "$job_applied" == true ]]; then
    "$KUBECTL" delete mwj "$NAME" -n "$NAMESPACE" --ignore-not-found --timeout=60s ||
      log "warning: kubectl delete mwj $NAME failed"
  fi
  if [[ "$created_namespace" == true ]]; then
    "$KUBECTL" delete namespace "$NAMESPACE" --ignore-not-found --wait=false
  fi
  if [[ "$operator_applied" == true ]]; then
    log "removing the operator and the CRD"
    "$KUBECTL" delete -f "$MANIFESTS" --ignore-not-found --timeout=120s ||
      log "warning: kubectl delete -f $MANIFESTS failed"
  fi
  rm -rf "$workdir"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

"$KIND" get kubeconfig --name "$CLUSTER" >"$KUBECONFIG"
connected=true

log "installing the CRD and the operator ($OPERATOR_IMAGE) into kind-$CLUSTER"
operator_applied=true
"$KUBECTL" apply -f "$MANIFESTS"
# The manifest names the release's image (IfNotPresent, so a loaded image is used as is);
# this runs the one that was built and loaded. The same image changes nothing.
"$KUBECTL" set image -n "$OPERATOR_NAMESPACE" "$OPERATOR_DEPLOYMENT" "$OPERATOR_CONTAINER=$OPERATOR_IMAGE"
"$KUBECTL" wait --for=condition=Established "crd/$CRD" --timeout=60s
"$KUBECTL" rollout status -n "$OPERATOR_NAMESPACE" "$OPERATOR_DEPLOYMENT" --timeout=180s

if ! "$KUBECTL" get namespace "$NAMESPACE" >/dev/null 2>&1; then
  "$KUBECTL" create namespace "$NAMESPACE"
  created_namespace=true
fi

# The MultiWorkerJob: SPEC with this test's values, set the way `tflaunch submit --set` sets
# them and validated by the same code, so a bad value fails here rather than in the cluster.
manifest="$ARTIFACTS/multiworkerjob.yaml"
"$PYTHON" - "$SPEC" "$NAME" "$NAMESPACE" "$IMAGE" "$WORKERS" "$EPOCHS" >"$manifest" <<'EOF'
import sys

import yaml

from launcher.core.errors import SpecError
from launcher.core.load import job_from_document
from launcher.core.yamldoc import apply_overrides, dump, read_document

spec, name, namespace, image, workers, epochs = sys.argv[1:]
try:
    document = read_document(spec)
    apply_overrides(
        document,
        [
            ("metadata.name", name),
            ("metadata.namespace", namespace),
            ("spec.image", image),
            ("spec.imagePullPolicy", "IfNotPresent"),
            ("spec.workers", yaml.safe_load(workers)),
            ("spec.gpusPerWorker", 0),
            ("spec.trainer.epochs", yaml.safe_load(epochs)),
        ],
    )
    job_from_document(document)
except SpecError as error:
    sys.exit(f"kind-operator-test: the MultiWorkerJob made from {spec} is invalid: {error}")
sys.stdout.write(dump(document))  # its numbers as written (yamldoc.Dumper)
EOF

log "applying MultiWorkerJob $NAME: $WORKERS CPU workers, $EPOCHS epoch(s), image $IMAGE, namespace $NAMESPACE"
job_applied=true
"$KUBECTL" apply -n "$NAMESPACE" -f "$manifest"

# kubectl wait watches for Succeeded, POLL seconds at a time; between two, a look at the phase
# ends the test as soon as it is Failed, not after TIMEOUT.
deadline=$((SECONDS + TIMEOUT))
while true; do
  left=$((deadline - SECONDS))
  slice=$((left < POLL ? left : POLL))
  slice=$((slice > 1 ? slice : 1))
  if "$KUBECTL" wait "mwj/$NAME" -n "$NAMESPACE" --for=jsonpath='{.status.phase}'=Succeeded \
    --timeout="${slice}s" >/dev/null 2>&1; then
    break
  fi
  phase=$("$KUBECTL" get mwj "$NAME" -n "$NAMESPACE" -o jsonpath='{.status.phase}')
  case "$phase" in
    Succeeded) break ;;
    Failed)
      reason=$("$KUBECTL" get mwj "$NAME" -n "$NAMESPACE" \
        -o jsonpath='{.status.reason}: {.status.message}' || true)
      log "MultiWorkerJob $NAME failed: $reason"
      exit 3
      ;;
  esac
  if ((SECONDS >= deadline)); then
    log "MultiWorkerJob $NAME timed out after ${TIMEOUT}s, phase ${phase:-(none yet)}"
    exit 4
  fi
  log "MultiWorkerJob $NAME: phase ${phase:-(none yet)}, $((deadline - SECONDS))s left"
  # kubectl before 1.25 returned at once while the phase was unset (kubernetes/kubectl#1236).
  sleep 1
done
log "MultiWorkerJob $NAME succeeded"

"$KUBECTL" get mwj "$NAME" -n "$NAMESPACE" -o json >"$ARTIFACTS/multiworkerjob-status.json"
"$PYTHON" - "$ARTIFACTS/multiworkerjob-status.json" <<'EOF'
import json
import sys

with open(sys.argv[1]) as f:
    result = (json.load(f).get("status") or {}).get("result") or {}
accuracy = result.get("test_accuracy")
if isinstance(accuracy, bool) or not isinstance(accuracy, int | float) or not 0 <= accuracy <= 1:
    sys.exit(f"kind-operator-test: no test_accuracy in .status.result: {json.dumps(result)}")
print(f"kind-operator-test: chief's result (.status.result): {json.dumps(result)}", file=sys.stderr)
EOF

# Deleting the MultiWorkerJob must take everything the operator created for it.
"$KUBECTL" get "$OWNED" -n "$NAMESPACE" -l "$job_selector" -o name >"$ARTIFACTS/owned.txt"
for kind in job.batch service; do
  if ! grep -q "^$kind/" "$ARTIFACTS/owned.txt"; then
    log "no $kind labelled $job_selector before the delete: found $(paste -sd' ' "$ARTIFACTS/owned.txt")"
    exit 1
  fi
done
log "deleting MultiWorkerJob $NAME; its $(wc -l <"$ARTIFACTS/owned.txt") objects must follow"
"$KUBECTL" delete mwj "$NAME" -n "$NAMESPACE" --timeout=60s
job_applied=false
deadline=$((SECONDS + DELETE_TIMEOUT))
while true; do
  remaining=$("$KUBECTL" get "$OWNED" -n "$NAMESPACE" -l "$job_selector" -o name)
  if [[ -z "$remaining" ]]; then
    break
  fi
  if ((SECONDS >= deadline)); then
    log "still there ${DELETE_TIMEOUT}s after the MultiWorkerJob was deleted: ${remaining//$'\n'/ }"
    exit 1
  fi
  sleep 2
done
log "its objects are gone"
log "passed"

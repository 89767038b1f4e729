"""Rendered objects: golden files, upstream schemas, and the properties MWMS depends on."""

from __future__ import annotations

import os
import runpy
from pathlib import Path

import pytest
import yaml

from launcher.core import exit_policy
from launcher.core.load import load_job
from launcher.core.render import render, to_json, to_yaml

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "data" / "golden"
UPDATE = os.environ.get("TFLAUNCH_UPDATE_GOLDEN") == "1"

GOLDEN_CASES = {
    "indexed-3-workers.yaml": [("spec.workers", 3), ("spec.trainer.globalBatchSize", 192)],
    "per-worker-2-gpus.yaml": [
        ("spec.layout", "per-worker"),
        ("spec.gpusPerWorker", 2),
        ("spec.image", "tflaunch-trainer:0.1.0"),
        ("spec.trainer.globalBatchSize", 256),
        ("spec.checkpoint.claimName", "ckpt"),
    ],
    "own-script-2-workers.yaml": [
        ("spec.script", str(ROOT / "tests" / "data" / "own-train.py")),
        ("spec.args", ["--epochs", "2"]),
        ("spec.stallTimeoutSeconds", 600),
    ],
}


@pytest.mark.parametrize("name", sorted(GOLDEN_CASES))
def test_render_matches_the_golden_file(name):
    text = to_yaml(render(load_job("examples/mnist.yaml", GOLDEN_CASES[name])))
    path = GOLDEN / name
    if UPDATE:
        path.write_text(text)
    assert text == path.read_text(), "re-run with TFLAUNCH_UPDATE_GOLDEN=1 if the change is meant"


def test_checked_in_manifests_match_a_fresh_render():
    script = runpy.run_path(str(ROOT / "scripts" / "render_manifests.py"))
    for target, text in script["expected"]().items():
        assert (ROOT / target).read_text() == text, f"{target} is stale: run `make render`"


def _kitchen_sink(layout: str) -> list[dict]:
    return render(
        load_job(
            "examples/mnist-gpu.yaml",
            [
                ("spec.layout", layout),
                ("spec.nodeSelector", {"pool": "gpu"}),
                (
                    "spec.affinity",
                    {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {
                                        "matchExpressions": [
                                            {"key": "gpu", "operator": "In", "values": ["a100"]}
                                        ]
                                    }
                                ]
                            }
                        }
                    },
                ),
                ("spec.imagePullSecrets", ["regcred"]),
                ("spec.schedulerName", "volcano"),
                ("spec.priorityClassName", "high"),
                ("spec.serviceAccountName", "trainer"),
                ("spec.activeDeadlineSeconds", 3600),
                ("spec.env", {"NCCL_DEBUG": "INFO"}),
                ("spec.labels", {"kueue.x-k8s.io/queue-name": "gpu"}),
                ("spec.annotations", {"a/b": "c"}),
                ("spec.suspend", True),
                ("spec.trainer.stepsPerEpoch", 10),
                ("spec.trainer.extraArgs", ["--seed", "1"]),
                ("spec.trainer.dataPath", "/data/m.npz"),
            ],
        )
    )


def _newest_kubernetes() -> str:
    from launcher.core.schemas import latest_kubernetes_version

    return latest_kubernetes_version()


@pytest.mark.parametrize("version", ["1.29", "newest"])
@pytest.mark.parametrize("layout", ["indexed", "per-worker"])
def test_every_object_validates_strictly_against_upstream_schemas(version, layout):
    pytest.importorskip("kubernetes_validate")
    from launcher.core.schemas import validate_objects

    version = _newest_kubernetes() if version == "newest" else version
    for objects in (_kitchen_sink(layout), render(load_job(None, [("spec.layout", layout)]))):
        if version == "1.29":  # the container restart rules are 1.35's: submit drops them there
            assert [job for job in objects if exit_policy.drop_container_restart_rules(job)]
        validate_objects(objects, version)


def test_validate_command_reports_the_schema_version(capsys):
    pytest.importorskip("kubernetes_validate")
    from launcher.cli.main import run

    assert run(["validate", "examples/mnist.yaml", "--kubernetes-version", "1.29"]) == 0
    printed = capsys.readouterr()
    assert "valid against Kubernetes 1.29" in printed.out
    assert printed.err.startswith("note: Kubernetes 1.29 has no container restartPolicyRules")
    assert run(["validate", "examples/mnist.yaml", "--kubernetes-version", "1.35"]) == 0
    assert capsys.readouterr().err == ""


def test_the_headless_service_publishes_workers_before_they_are_ready():
    (service,) = [o for o in render(load_job(None)) if o["kind"] == "Service"]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True


def _pod_spec(objects: list[dict]) -> dict:
    return next(o for o in objects if o["kind"] == "Job")["spec"]["template"]["spec"]


def test_gpus_are_limits_only_and_only_when_asked_for():
    cpu = _pod_spec(render(load_job(None)))["containers"][0]["resources"]
    assert "nvidia.com/gpu" not in {**cpu["limits"], **cpu["requests"]}
    gpu = _pod_spec(render(load_job("examples/mnist-gpu.yaml")))["containers"][0]["resources"]
    assert gpu["limits"]["nvidia.com/gpu"] == "1"
    assert "nvidia.com/gpu" not in gpu["requests"]


def test_pods_are_hardened_and_never_restarted_in_place():
    spec = _pod_spec(render(load_job(None)))
    (container,) = spec["containers"]
    assert spec["restartPolicy"] == "Never"
    assert container["name"] == "trainer"
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["TF_USE_LEGACY_KERAS"] == "1", "Keras 3's fit fails under MWMS; tf-keras needs this"


def test_config_errors_fail_the_job_and_evictions_are_not_counted():
    from launcher.core import contract

    (job,) = [o for o in render(load_job(None)) if o["kind"] == "Job"]
    rules = job["spec"]["podFailurePolicy"]["rules"]
    assert rules[0]["action"] == "FailJob"
    assert rules[0]["onExitCodes"]["values"] == [contract.EXIT_CONFIG_ERROR]
    assert {
        "action": "Ignore",
        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
    } in rules


def test_a_preemption_the_trainer_saved_before_is_ignored_and_the_grace_period_covers_it():
    """Exit 79: every worker saved at the same step; the replacement pods resume there."""
    from launcher.core import contract

    job = load_job(None, [("spec.terminationGracePeriodSeconds", 45)])
    (rendered,) = [o for o in render(job) if o["kind"] == "Job"]
    assert {
        "action": "Ignore",
        "onExitCodes": {
            "containerName": "trainer",
            "operator": "In",
            "values": [contract.EXIT_PREEMPTED],
        },
    } in rendered["spec"]["podFailurePolicy"]["rules"]
    assert rendered["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 45
    assert load_job(None).spec.termination_grace_period_seconds == 60


def test_backoff_limit_counts_group_restarts_not_pod_failures():
    (indexed,) = [o for o in render(load_job(None, [("spec.workers", 4)])) if o["kind"] == "Job"]
    assert indexed["spec"]["backoffLimit"] == 3 * 4
    per_worker = [
        o for o in render(load_job(None, [("spec.layout", "per-worker")])) if o["kind"] == "Job"
    ]
    assert [j["spec"]["backoffLimit"] for j in per_worker] == [3, 3]


def test_network_policy_admits_only_the_jobs_own_workers_and_can_be_turned_off():
    objects = render(load_job(None))
    (policy,) = [o for o in objects if o["kind"] == "NetworkPolicy"]
    (rule,) = policy["spec"]["ingress"]
    assert rule["from"][0]["podSelector"] == policy["spec"]["podSelector"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 2222}, {"protocol": "TCP", "port": 2223}]
    off = render(load_job(None, [("spec.networkPolicy", False)]))
    assert "NetworkPolicy" not in [o["kind"] for o in off]


def test_yaml_looking_strings_stay_strings():
    """Names like `yes` or `null` must not turn into booleans when YAML reads them back."""
    objects = render(
        load_job(
            None,
            [
                ("metadata.name", "yes"),
                ("metadata.namespace", "null"),
                ("spec.env", {"FLAG": "true", "N": "010"}),
            ],
        )
    )
    assert all(o["metadata"]["name"].startswith("yes") for o in objects)
    assert all(o["metadata"]["namespace"] == "null" for o in objects)
    env = {e["name"]: e.get("value") for e in _pod_spec(objects)["containers"][0]["env"]}
    assert env["FLAG"] == "true" and env["N"] == "010"


def test_json_output_is_a_list_kubectl_accepts():
    objects = render(load_job(None))
    parsed = yaml.safe_load(to_json(objects))
    assert parsed["kind"] == "List" and parsed["items"] == objects


def test_out_dir_gets_one_file_per_object(tmp_path, capsys):
    from launcher.cli.main import run

    assert run(["render", "--layout", "per-worker", "--out-dir", str(tmp_path)]) == 0
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == [
        "job-mnist-worker-0.yaml",
        "job-mnist-worker-1.yaml",
        "networkpolicy-mnist-tf-peers.yaml",
        "service-mnist.yaml",
    ]


def test_an_indexed_jobs_backoff_limit_says_its_arithmetic():
    """`backoffLimit: 3` in the spec became `backoffLimit: 6` in the Job with no word why."""
    (job,) = [o for o in render(load_job(None, [("spec.backoffLimit", 3)])) if o["kind"] == "Job"]
    assert job["spec"]["backoffLimit"] == 6
    assert job["metadata"]["annotations"]["tflaunch.dev/backoff-limit"] == (
        "6 pod failures = spec.backoffLimit 3 group restarts x 2 workers (a group failure "
        "fails every worker's pod)"
    )


def test_a_per_worker_jobs_backoff_limit_is_the_specs_and_needs_no_word():
    jobs = [
        o for o in render(load_job(None, [("spec.layout", "per-worker")])) if o["kind"] == "Job"
    ]
    assert {j["spec"]["backoffLimit"] for j in jobs} == {3}
    assert not any(
        "tflaunch.dev/backoff-limit" in j["metadata"].get("annotations", {}) for j in jobs
    )

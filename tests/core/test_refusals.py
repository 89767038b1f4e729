"""What the API server or the kernel would refuse is refused at render, in one line (issue 11)."""

from __future__ import annotations

import pytest

from launcher.cli.main import run
from launcher.core import render
from launcher.core.errors import SpecError
from launcher.core.load import load_job
from launcher.core.yamldoc import parse_assignment

EXAMPLE = "examples/mnist.yaml"


def _error(overrides: list[tuple[str, object]]) -> SpecError:
    with pytest.raises(SpecError) as caught:
        load_job(EXAMPLE, overrides)
    return caught.value


def _spec_file(tmp_path, spec_lines: str, name: str = "mnist") -> str:
    path = tmp_path / "job.yaml"
    path.write_text(
        "apiVersion: tflaunch.dev/v1alpha1\nkind: MultiWorkerJob\n"
        f"metadata: {{name: {name}}}\nspec:\n  image: r.io/t:1\n{spec_lines}"
    )
    return str(path)


def _env(job) -> dict[str, str]:
    (job_obj,) = [o for o in render.render(job) if o["kind"] == "Job"]
    container = job_obj["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value") for e in container["env"]}


# --- item 7: strings stay strings ----------------------------------------------------------


@pytest.mark.parametrize("written", ["3.10", "0x1F", "1e3", "010", "1_000", "+1.50", ".5"])
def test_an_unquoted_number_in_a_string_field_keeps_its_text(tmp_path, written):
    path = _spec_file(tmp_path, f"  env: {{VERSION: {written}}}\n  labels: {{v: '1'}}\n")
    assert _env(load_job(path))["VERSION"] == written


def test_a_label_value_keeps_its_text(tmp_path):
    job = load_job(_spec_file(tmp_path, "  labels: {version: 1.10}\n"))
    assert job.spec.labels["version"] == "1.10"


@pytest.mark.parametrize("written", ["1.10", "0x1F", "007"])
def test_set_types_the_value_by_the_target_field(written):
    job = load_job(EXAMPLE, [parse_assignment(f"spec.env.V={written}")])
    assert job.spec.env["V"] == written
    assert load_job(EXAMPLE, [parse_assignment("spec.workers=4")]).spec.workers == 4


@pytest.mark.parametrize("value", ["y", "n", "Y", "N", "yes", "off", "1.10", "0x1F", "null"])
def test_rendered_yaml_quotes_strings_that_kubectl_would_read_as_other_types(value):
    job = load_job(EXAMPLE, [("spec.labels", {"v": value}), ("spec.env", {"V": value})])
    text = render.to_yaml(render.render(job))
    go_yaml_like = yaml_1_1_reader(text)
    for obj in go_yaml_like:
        assert obj["metadata"]["labels"]["v"] == value


def yaml_1_1_reader(text):
    """A loader that also reads y/Y/n/N as booleans, as kubectl's YAML 1.1 parser does."""
    import re

    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:bool", re.compile(r"^(?:y|Y|n|N)$"), list("yYnN")
    )
    Loader.add_constructor(
        "tag:yaml.org,2002:bool",
        lambda loader, node: node.value.lower() in ("y", "yes", "true", "on"),
    )
    return list(yaml.load_all(text, Loader=Loader))


@pytest.mark.parametrize("text", ["\U0001f600 ok", "a\\\U0001f600", "\\ud83d\\ude00", "\\\\ud83d"])
def test_any_unicode_text_renders_back_as_written(text):
    import yaml

    job = load_job(EXAMPLE, [("spec.annotations", {"note": text})])
    for obj in yaml.safe_load_all(render.to_yaml(render.render(job))):
        assert obj["metadata"]["annotations"]["note"] == text


def test_a_date_like_string_stays_a_string(tmp_path):
    job = load_job(_spec_file(tmp_path, "  env: {DAY: 2024-01-31}\n"))
    assert job.spec.env["DAY"] == "2024-01-31"


# --- item 5: env names the launcher sets ---------------------------------------------------


@pytest.mark.parametrize(
    "name, says",
    [
        ("HOME", "/tmp"),
        ("TF_CONFIG", "spec.workers"),
        ("WORKER_INDEX", "completion index"),
        ("TF_USE_LEGACY_KERAS", "tf-keras"),
        ("TFLAUNCH_DATA", "spec.trainer.dataPath"),
        ("TFLAUNCH_RESTARTS", "restart"),
        ("TFLAUNCH_JOB_UID", "spec.restart inPlace"),
        ("TFLAUNCH_ANYTHING", "TFLAUNCH_LOG_LEVEL"),
    ],
)
def test_env_names_the_launcher_sets_are_refused_saying_what_sets_them(name, says):
    error = _error([("spec.env", {name: "x"})])
    assert error.field == f"spec.env.{name}"
    assert says in str(error)


def test_tflaunch_log_level_is_allowed():
    job = load_job(EXAMPLE, [("spec.env", {"TFLAUNCH_LOG_LEVEL": "debug"})])
    assert _env(job)["TFLAUNCH_LOG_LEVEL"] == "debug"


def test_standbys_can_be_turned_off_as_docs_restart_in_place_says():
    job = load_job(EXAMPLE, [("spec.env", {"TFLAUNCH_STANDBY_IMPORTS": ""})])
    assert _env(job)["TFLAUNCH_STANDBY_IMPORTS"] == ""


def test_a_key_written_twice_is_refused(tmp_path):
    path = _spec_file(tmp_path, "  env:\n    A: '1'\n    A: '2'\n")
    with pytest.raises(SpecError, match="twice"):
        load_job(path)


# --- item 4: int32, quantities, reserved keys, mount paths ---------------------------------


@pytest.mark.parametrize(
    "overrides, field, hint",
    [
        (
            [("spec.backoffLimit", 2**30), ("spec.workers", 4)],
            "spec.backoffLimit",
            "2147483647",
        ),
        ([("spec.ttlSecondsAfterFinished", 2**31)], "spec.ttlSecondsAfterFinished", "2147483647"),
        ([("spec.activeDeadlineSeconds", 2**31)], "spec.activeDeadlineSeconds", "2147483647"),
        ([("spec.gpusPerWorker", 2**31)], "spec.gpusPerWorker", "2147483647"),
        (
            [("spec.resources", {"requests": {"cpu": "3"}, "limits": {"cpu": "2500m"}})],
            "spec.resources.requests.cpu",
            "above its limit",
        ),
        (
            [("spec.resources", {"requests": {"memory": "5Gi"}, "limits": {"memory": "4G"}})],
            "spec.resources.requests.memory",
            "above its limit",
        ),
        ([("spec.labels", {"batch.kubernetes.io/x": "a"})], "spec.labels", "reserved"),
        ([("spec.labels", {"kubernetes.io/x": "a"})], "spec.labels", "reserved"),
        ([("spec.annotations", {"k8s.io/x": "a"})], "spec.annotations", "reserved"),
        ([("spec.annotations", {"node.k8s.io/x": "a"})], "spec.annotations", "reserved"),
        ([("spec.checkpoint.mountPath", "/tmp")], "spec.checkpoint.mountPath", "/tmp"),
        ([("spec.checkpoint.mountPath", "/tmp/")], "spec.checkpoint.mountPath", "/tmp"),
    ],
)
def test_what_the_server_would_refuse_is_refused_at_render(overrides, field, hint):
    error = _error(overrides)
    assert error.field.startswith(field)
    assert hint in str(error)


def test_a_request_equal_to_its_limit_in_other_units_is_fine():
    resources = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1000m"}}
    load_job(EXAMPLE, [("spec.resources", resources)])
    resources = {"requests": {"memory": "1024Mi"}, "limits": {"memory": "1Gi"}}
    load_job(EXAMPLE, [("spec.resources", resources)])


def test_node_selectors_may_use_kubernetes_io_keys():
    job = load_job(EXAMPLE, [("spec.nodeSelector", {"kubernetes.io/arch": "amd64"})])
    assert job.spec.node_selector == {"kubernetes.io/arch": "amd64"}


# --- item 6: privileged ports --------------------------------------------------------------


@pytest.mark.parametrize("port", [1, 80, 1023])
def test_a_port_below_1024_is_refused(port):
    error = _error([("spec.port", port)])
    assert error.field == "spec.port"
    assert "non-root" in str(error) and "1024" in str(error)


# --- item 3: TF_CONFIG size and the per-worker layout --------------------------------------


def test_a_tf_config_over_128_kib_is_refused_with_the_largest_count_that_fits():
    name, namespace = "n" * 44, "s" * 63
    error = _error(
        [
            ("metadata.name", name),
            ("metadata.namespace", namespace),
            ("spec.workers", 2000),
            ("spec.trainer.globalBatchSize", 2000),
        ]
    )
    assert error.field == "spec.workers"
    largest = int(str(error).split("at most ")[1].split()[0])
    fits = load_job(
        EXAMPLE,
        [
            ("metadata.name", name),
            ("metadata.namespace", namespace),
            ("spec.workers", largest),
            ("spec.trainer.globalBatchSize", largest),
        ],
    )
    tf_config = _env(fits)["TF_CONFIG"].replace("$(WORKER_INDEX)", str(largest - 1))
    assert len(f"TF_CONFIG={tf_config}".encode()) + 1 <= 128 * 1024
    with pytest.raises(SpecError):
        load_job(
            EXAMPLE,
            [
                ("metadata.name", name),
                ("metadata.namespace", namespace),
                ("spec.workers", largest + 1),
                ("spec.trainer.globalBatchSize", largest + 1),
            ],
        )


def test_default_names_fit_two_thousand_workers():
    load_job(EXAMPLE, [("spec.workers", 2000), ("spec.trainer.globalBatchSize", 2000)])


def test_the_per_worker_layout_is_capped_pointing_to_the_indexed_layout():
    error = _error(
        [
            ("spec.layout", "per-worker"),
            ("spec.workers", 3000),
            ("spec.trainer.globalBatchSize", 3000),
        ]
    )
    assert error.field == "spec.workers"
    assert "indexed" in str(error)


# --- item 8: alias bombs and typed tolerations ---------------------------------------------


def test_a_yaml_alias_bomb_is_refused_before_it_expands(tmp_path):
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    for level in range(1, 8):
        prev = f"*a{level - 1}"
        lines.append(f"a{level}: &a{level} [{', '.join([prev] * 9)}]")
    path = tmp_path / "bomb.yaml"
    path.write_text(
        "\n".join(lines)
        + "\napiVersion: tflaunch.dev/v1alpha1\nkind: MultiWorkerJob\nmetadata: {name: m}\n"
        "spec: {image: r.io/t:1, affinity: {x: *a7}}\n"
    )
    with pytest.raises(SpecError, match="alias"):
        load_job(str(path))


@pytest.mark.parametrize(
    "toleration, field",
    [
        ({"key": "a", "operator": "Sometimes"}, "spec.tolerations[0].operator"),
        ({"key": "a", "effect": "NoRun"}, "spec.tolerations[0].effect"),
        ({"key": "a", "colour": "red"}, "spec.tolerations[0].colour"),
        ({"operator": "Exists", "value": "v"}, "spec.tolerations[0].value"),
    ],
)
def test_tolerations_are_typed(toleration, field):
    error = _error([("spec.tolerations", [toleration])])
    assert error.field == field


def test_affinity_is_checked_against_the_upstream_schema():
    pytest.importorskip("kubernetes_validate")
    error = _error([("spec.affinity", {"nodeAffinity": {"required": []}})])
    assert error.field.startswith("spec.affinity")


# --- item 9: one-line errors ---------------------------------------------------------------


def test_a_non_utf8_spec_file_is_one_line_with_the_byte_offset(tmp_path, capsys):
    path = tmp_path / "job.yaml"
    path.write_bytes(b"apiVersion: tflaunch.dev/v1alpha1\nkind: \xff\n")
    assert run(["render", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "UTF-8" in err and "offset 40" in err


def test_an_unsupported_kubernetes_version_lists_the_supported_ones(capsys):
    pytest.importorskip("kubernetes_validate")
    assert run(["validate", EXAMPLE, "--kubernetes-version", "1.22"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "1.22" in err and "1.29" in err

"""Bad input is caught before anything renders: one line naming the field and the fix."""

from __future__ import annotations

import pytest
import yaml

from launcher.cli.main import run
from launcher.core.errors import SpecError
from launcher.core.load import load_job
from launcher.core.yamldoc import default_document

EXAMPLE = "examples/mnist.yaml"


def _error(overrides: list[tuple[str, object]]) -> SpecError:
    with pytest.raises(SpecError) as caught:
        load_job(EXAMPLE, overrides)
    return caught.value


def test_the_embedded_default_is_the_reference_example():
    import yaml

    with open(EXAMPLE) as f:
        assert default_document() == yaml.safe_load(f)


def test_examples_load_with_their_defaults_filled_in():
    job = load_job(EXAMPLE)
    assert job.name == "mnist"
    assert job.spec.workers == 2
    assert job.spec.port == 2222
    assert job.spec.cluster_domain == "cluster.local"
    assert job.spec.layout == "indexed"
    assert load_job("examples/mnist-gpu.yaml").spec.gpus_per_worker == 1


@pytest.mark.parametrize(
    "overrides, field, hint",
    [
        ([("spec.wrokers", 3)], "spec.wrokers", "did you mean 'workers'"),
        ([("spec.trainer.globalBatchSise", 3)], "spec.trainer.globalBatchSise", "globalBatchSize"),
        ([("spec.workers", 0)], "spec.workers", "at least 1"),
        ([("spec.workers", "two")], "spec.workers", "expected an integer"),
        ([("spec.workers", True)], "spec.workers", "expected an integer"),
        ([("metadata.name", "MNIST")], "metadata.name", "DNS-1035"),
        ([("metadata.name", "1mnist")], "metadata.name", "starting with a letter"),
        ([("metadata.name", "m" * 60)], "metadata.name", "at most"),
        ([("spec.port", 70000)], "spec.port", "between 1024 and 65535"),
        ([("spec.port", 0)], "spec.port", "between 1024 and 65535"),
        ([("spec.gpusPerWorker", -1)], "spec.gpusPerWorker", "at least 0"),
        ([("spec.image", "")], "spec.image", "is required"),
        ([("spec.image", "has space")], "spec.image", "not an image reference"),
        ([("spec.trainer.globalBatchSize", 255)], "spec.trainer.globalBatchSize", "multiple of 2"),
        (
            [
                ("spec.gpusPerWorker", 4),
                ("spec.trainer.globalBatchSize", 100),
                ("spec.image", "tflaunch-trainer:0.1.0"),
            ],
            "spec.trainer.globalBatchSize",
            "8 replicas",
        ),
        ([("spec.layout", "sharded")], "spec.layout", "indexed, per-worker"),
        ([("spec.imagePullPolicy", "Sometimes")], "spec.imagePullPolicy", "Always"),
        ([("spec.resources.limits.memory", "4 GB")], "spec.resources.limits.memory", "quantity"),
        ([("spec.env", {"TF_CONFIG": "{}"})], "spec.env.TF_CONFIG", "set by tflaunch"),
        ([("spec.env", {"1X": "a"})], "spec.env.1X", "not a valid environment variable"),
        (
            [("spec.labels", {"tflaunch.dev/job-name": "x"})],
            "spec.labels.tflaunch.dev/job-name",
            "set by tflaunch",
        ),
        ([("spec.trainer.saveFreq", "hourly")], "spec.trainer.saveFreq", '"epoch"'),
        ([("spec.checkpoint.mountPath", "data")], "spec.checkpoint.mountPath", "absolute"),
        ([("apiVersion", "v1")], "apiVersion", "tflaunch.dev/v1alpha1"),
        ([("kind", "TFJob")], "kind", "MultiWorkerJob"),
        ([("spec.tolerations", "all")], "spec.tolerations", "expected a list"),
        ([("spec.clusterDomain", "Cluster_Local")], "spec.clusterDomain", "DNS domain"),
    ],
)
def test_bad_input_names_the_field_and_the_fix(overrides, field, hint):
    error = _error(overrides)
    assert error.field == field
    assert hint in str(error)


def test_missing_required_fields_are_named(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(
        "apiVersion: tflaunch.dev/v1alpha1\nkind: MultiWorkerJob\nmetadata: {}\nspec: {}\n"
    )
    with pytest.raises(SpecError) as caught:
        load_job(str(path))
    assert caught.value.field == "metadata.name"


@pytest.mark.parametrize(
    "content, expected",
    [
        ("spec: [unclosed", "malformed YAML at line 1"),
        ("- a\n- b\n", "expected a YAML mapping"),
        ("a: 1\n---\nb: 2\n", "found 2 documents"),
    ],
)
def test_malformed_files_are_one_line_errors(tmp_path, capsys, content, expected):
    path = tmp_path / "job.yaml"
    path.write_text(content)
    assert run(["render", str(path)]) == 2
    err = capsys.readouterr().err
    assert expected in err
    assert len(err.strip().splitlines()) == 1


def test_an_unreadable_spec_file_is_a_usage_error(capsys):
    assert run(["render", "does-not-exist.yaml"]) == 2
    err = capsys.readouterr().err
    assert "cannot read does-not-exist.yaml" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "flags, field",
    [
        (["--workers", "0"], "spec.workers"),
        (["--gpus", "-1"], "spec.gpusPerWorker"),
        (["--set", "spec.port=99999"], "spec.port"),
        (["--set", "spec.trainer.epocs=2"], "spec.trainer.epocs"),
        (["--set", "nonsense"], "--set"),
        (["--set", "spec.workers.x=1"], "spec.workers.x"),
        (["--name", "Bad_Name"], "metadata.name"),
    ],
)
def test_bad_flags_exit_2_with_one_line_and_nothing_written(tmp_path, capsys, flags, field):
    out_dir = tmp_path / "out"
    assert run(["render", *flags, "--out-dir", str(out_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert field in err
    assert not out_dir.exists()


def test_set_reaches_any_field_and_flags_win_over_the_file():
    from launcher.cli.options import job_from_options

    job = job_from_options(
        EXAMPLE, ("spec.trainer.stepsPerEpoch=7", "spec.nodeSelector={pool: gpu}"), workers=4
    )
    assert job.spec.trainer.steps_per_epoch == 7
    assert job.spec.node_selector == {"pool": "gpu"}
    assert job.spec.workers == 4


def test_render_works_with_flags_alone(capsys):
    assert run(["render", "--workers", "4", "--gpus", "1", "--image", "r.io/t:1"]) == 0
    out = capsys.readouterr().out
    assert "r.io/t:1" in out and "completions: 4" in out


@pytest.mark.parametrize("key", ["\n", "a\tb", "x\x00"])
def test_an_unknown_key_that_is_not_printable_is_named_on_one_line(key):
    from launcher.core.load import job_from_document

    document = default_document()
    document["spec"][key] = None
    with pytest.raises(SpecError) as caught:
        job_from_document(document)
    assert caught.value.field == f"spec.{key!r}"
    assert str(caught.value).isprintable(), str(caught.value)  # one line, no control characters


@pytest.mark.parametrize(
    ("remove", "field", "says"),
    [(("apiVersion",), "apiVersion", "add it (always tflaunch.dev/v1alpha1)"),
     (("kind",), "kind", "add it (always MultiWorkerJob)"),
     (("metadata", "name"), "metadata.name", "add it (job name: a DNS-1035 label)"),
     (("spec", "image"), "spec.image", "add it (trainer image, e.g. ")],
)  # fmt: skip
def test_a_missing_required_key_says_what_to_add(remove, field, says):
    from launcher.core.load import job_from_document

    document = default_document()
    parent = document
    for key in remove[:-1]:
        parent = parent[key]
    del parent[remove[-1]]
    with pytest.raises(SpecError) as caught:
        job_from_document(document)
    assert caught.value.field == field
    assert f"is required; {says}" in str(caught.value), str(caught.value)


def test_render_hands_the_words_after_double_dash_to_a_program_of_yours(tmp_path, capsys):
    """`tflaunch local --script train.py -- --epochs 2` worked; `render` and `submit` refused
    the same words ("Got unexpected extra argument")."""
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    assert run(["render", "--script", str(script), "--", "--epochs", "2"]) == 0
    (job,) = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d["kind"] == "Job"]
    command = job["spec"]["template"]["spec"]["containers"][0]["args"]
    program = command[command.index("--") + 1 :]
    assert program[-3:] == ["/opt/tflaunch/script/train.py", "--epochs", "2"], program
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "apiVersion: tflaunch.dev/v1alpha1\nkind: MultiWorkerJob\nmetadata: {name: mine}\n"
        "spec: {image: img:1, command: [python, t.py], args: [--lr, '0.1']}\n"
    )
    assert run(["render", str(spec), "--", "--epochs", "2"]) == 0
    (job,) = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d["kind"] == "Job"]
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[-6:] == ["python", "t.py", "--lr", "0.1", "--epochs", "2"], args


def test_words_after_double_dash_for_the_built_in_trainer_are_refused_naming_the_way(capsys):
    assert run(["render", "--", "--epochs", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tflaunch: error: PROGRAM_ARGS: the built-in trainer takes its settings")
    assert "--set spec.trainer.FIELD=VALUE" in err and len(err.splitlines()) == 1


def test_a_spec_with_three_mistakes_says_all_three_in_one_line(capsys):
    """It used to say one per run: three runs to find three typos."""
    code = run(["validate", "--set", "spec.workers=0", "--set", "spec.trainer.epochs=-1",
                "--set", "spec.bogus=1"])  # fmt: skip
    assert code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("tflaunch: error: 3 mistakes: spec.bogus: unknown key"), line
    assert "; spec.workers: must be at least 1, got 0; " in line
    assert line.endswith("; spec.trainer.epochs: must be at least 1, got -1")
    with pytest.raises(SpecError) as caught:  # the first one's field, for callers that name it
        load_job(None, [("spec.workers", 0), ("spec.trainer.epochs", -1)])
    assert caught.value.field == "spec.workers"


def test_mistakes_between_fields_are_all_said_in_one_line_too(capsys):
    """The rules between fields (a batch that must divide, an egress that needs its policy,
    an absolute mount path) used to stop at their first: three runs for three mistakes."""
    code = run(["validate", "--set", "spec.trainer.globalBatchSize=63", "--set",
                "spec.egress=peers", "--set", "spec.networkPolicy=false", "--set",
                "spec.checkpoint.mountPath=ckpt"])  # fmt: skip
    assert code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("tflaunch: error: 3 mistakes: spec.trainer.globalBatchSize: "), line
    assert "; spec.checkpoint.mountPath: must be an absolute path; " in line
    assert "; spec.egress: needs spec.networkPolicy: true" in line


def test_a_rule_that_cannot_read_a_spec_already_wrong_adds_nothing():
    """A later rule tripping over an earlier mistake is a consequence, not another mistake;
    on a spec with no mistake found yet, the same failure is a bug and is not hidden."""
    from launcher.core.mistakes import Mistakes

    def tripping() -> None:
        raise KeyError("a consequence")

    with pytest.raises(KeyError):
        Mistakes().check(tripping)
    found = Mistakes()
    found.add(SpecError("spec.workers", "must be at least 1, got 0"))
    found.check(tripping)
    found.add(SpecError("spec.workers", "must be at least 1, got 0"))  # said once
    with pytest.raises(SpecError) as caught:
        found.raise_any()
    assert str(caught.value) == "spec.workers: must be at least 1, got 0"

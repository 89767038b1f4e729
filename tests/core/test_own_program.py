"""spec.command / spec.args / spec.script: the user's own program, through the worker wrapper."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from launcher.cli.main import run
from launcher.core import contract, render, script, script_lint
from launcher.core.errors import SpecError
from launcher.core.load import job_from_document, load_job

EXAMPLE = "examples/mnist.yaml"


def _container(job) -> dict:
    (job_obj,) = [o for o in render.render(job) if o["kind"] == "Job"]
    return job_obj["spec"]["template"]["spec"]["containers"][0]


def _error(overrides) -> SpecError:
    with pytest.raises(SpecError) as caught:
        load_job(EXAMPLE, overrides)
    return caught.value


def test_the_built_in_trainer_runs_through_the_wrapper_with_its_flags():
    container = _container(load_job(EXAMPLE, []))
    assert container["command"] == ["python", "-m", contract.WRAPPER_MODULE]
    args = container["args"]
    program = args[args.index("--") + 1 :]
    assert program[:3] == list(contract.BUILTIN_TRAINER)
    assert program[program.index("--epochs") + 1] == "3"
    assert args[args.index("--stall-timeout") + 1] == "0"  # the trainer has its own watchdog


def test_an_own_command_runs_through_the_wrapper_with_its_args_and_timeouts():
    job = load_job(
        EXAMPLE,
        [("spec.command", ["python", "/app/train.py"]), ("spec.args", ["--epochs", "2"]),
         ("spec.stallTimeoutSeconds", 900), ("spec.rendezvousTimeoutSeconds", 60),
         ("spec.workers", 3)],
    )  # fmt: skip
    args = _container(job)["args"]
    assert args[args.index("--") + 1 :] == ["python", "/app/train.py", "--epochs", "2"]
    assert args[args.index("--stall-timeout") + 1] == "900"
    assert args[args.index("--rendezvous-timeout") + 1] == "60"
    assert "ConfigMap" not in [o["kind"] for o in render.render(job)]


def test_the_global_batch_of_the_built_in_trainer_does_not_bind_an_own_program():
    job = load_job(EXAMPLE, [("spec.command", ["python", "t.py"]), ("spec.workers", 3)])
    assert job.spec.workers == 3  # 256 does not split over 3 workers: not this program's rule


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ([("spec.trainer.epochs", 5)], "spec.trainer.epochs"),
        ([("spec.trainer.extraArgs", ["--x"])], "spec.trainer.extraArgs"),
    ],
)
def test_trainer_settings_with_an_own_command_are_one_clear_error(overrides, field):
    error = _error([("spec.command", ["python", "t.py"]), *overrides])
    assert error.field == field
    assert "built-in MNIST trainer" in error.message and "spec.args" in error.message


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ([("spec.args", ["--x"])], "spec.args"),
        ([("spec.stallTimeoutSeconds", 60)], "spec.stallTimeoutSeconds"),
        ([("spec.command", ["python", ""])], "spec.command[1]"),
        ([("spec.command", ["t"]), ("spec.stallTimeoutSeconds", 0)], "spec.stallTimeoutSeconds"),
    ],
)
def test_own_program_fields_are_checked(overrides, field):
    assert _error(overrides).field == field


def test_a_script_becomes_a_config_map_mounted_read_only_into_every_worker(tmp_path):
    path = tmp_path / "train.py"
    path.write_text("print('training')\n")
    job = load_job(EXAMPLE, [("spec.script", str(path)), ("spec.args", ["--epochs", "1"])])
    objects = render.render(job)
    (config_map,) = [o for o in objects if o["kind"] == "ConfigMap"]
    assert config_map["data"] == {"train.py": "print('training')\n"}
    assert config_map["immutable"] is True
    assert config_map["metadata"]["labels"]["tflaunch.dev/job-name"] == "mnist"
    (job_obj,) = [o for o in objects if o["kind"] == "Job"]
    pod = job_obj["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "script"]
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "script"]
    assert mount == {"name": "script", "mountPath": script.MOUNT_PATH, "readOnly": True}
    args = pod["containers"][0]["args"]
    assert args[args.index("--") + 1 :] == [
        "python", f"{script.MOUNT_PATH}/train.py", "--epochs", "1",
    ]  # fmt: skip


def test_an_edited_script_changes_the_config_map_name_and_so_the_pod_template(tmp_path):
    path = tmp_path / "train.py"
    names = []
    for text in ("print(1)\n", "print(2)\n"):
        path.write_text(text)
        objects = render.render(load_job(EXAMPLE, [("spec.script", str(path))]))
        names += [o["metadata"]["name"] for o in objects if o["kind"] == "ConfigMap"]
    assert len(set(names)) == 2


def test_a_script_path_in_a_spec_file_is_relative_to_that_file(tmp_path):
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print(1)\n")
    spec = yaml.safe_load(Path(EXAMPLE).read_text())
    spec["spec"].pop("trainer")
    spec["spec"]["script"] = "code/train.py"
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(spec))
    job = load_job(str(tmp_path / "job.yaml"), [])
    assert job.spec.script is not None and job.spec.script.name == "train.py"


def test_a_script_over_one_mebibyte_is_refused_pointing_to_an_image(tmp_path):
    path = tmp_path / "big.py"
    path.write_text("#" * (script.MAX_BYTES + 1))
    error = _error([("spec.script", str(path))])
    assert error.field == "spec.script"
    assert "1 MiB" in error.message and "Dockerfile.custom-example" in error.message


def test_a_script_of_exactly_one_mebibyte_is_fine(tmp_path):
    path = tmp_path / "big.py"
    path.write_text("#" * script.MAX_BYTES)
    assert load_job(EXAMPLE, [("spec.script", str(path))]).spec.script is not None


def test_a_script_whose_name_cannot_be_a_config_map_key_says_to_rename_it(tmp_path, capsys):
    path = tmp_path / "My Train.py"
    path.write_text("print(1)\n")
    assert run(["render", "--script", str(path)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "spec.script.name: 'My Train.py' is not a plain file name" in line
    assert "rename it" in line and "ConfigMap" in line


@pytest.mark.parametrize(
    ("write", "says"),
    [(None, "cannot read"), (b"\xff\xfe\x00", "not UTF-8")],
)
def test_an_unreadable_script_is_one_line(tmp_path, write, says):
    path = tmp_path / "train.py"
    if write is not None:
        path.write_bytes(write)
    error = _error([("spec.script", str(path))])
    assert error.field == "spec.script" and says in error.message


def test_a_multiworkerjob_holds_the_script_itself_not_a_path():
    document = yaml.safe_load(Path(EXAMPLE).read_text())
    document["spec"].pop("trainer")
    document["spec"]["script"] = "train.py"
    with pytest.raises(SpecError) as caught:
        job_from_document(document)
    assert caught.value.field == "spec.script" and "{name, source}" in caught.value.message
    document["spec"]["script"] = {"name": "../x.py", "source": "print(1)"}
    with pytest.raises(SpecError) as caught:
        job_from_document(document)
    assert caught.value.field == "spec.script.name"


def test_the_script_flag_names_the_job_after_the_script_and_renders(tmp_path, capsys):
    path = tmp_path / "My_Train.py"
    path.write_text("print(1)\n")
    assert run(["render", "--script", str(path)]) == 0
    documents = list(yaml.safe_load_all(capsys.readouterr().out))
    assert {d["metadata"]["name"] for d in documents if d["kind"] == "Service"} == {"my-train"}
    assert "ConfigMap" in {d["kind"] for d in documents}


def test_trainer_flags_with_a_script_are_a_usage_error_exit_2(tmp_path, capsys):
    path = tmp_path / "train.py"
    path.write_text("print(1)\n")
    assert run(["render", "--script", str(path), "--epochs", "5"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "spec.trainer.epochs" in err


def test_the_multiworkerjob_the_cli_applies_carries_the_script_and_reads_back_the_same(tmp_path):
    from launcher.operator import crd

    path = tmp_path / "train.py"
    path.write_text("print('mine')\n")
    job = load_job(EXAMPLE, [("spec.script", str(path)), ("spec.args", ["--epochs", "1"])])
    document = {
        "apiVersion": job.api_version,
        "kind": job.kind,
        "metadata": crd.document_of(job.metadata),
        "spec": crd.document_of(job.spec),
    }
    assert document["spec"]["script"] == {"name": "train.py", "source": "print('mine')\n"}
    assert job_from_document(document) == job


@pytest.mark.parametrize(
    "flags",
    [["--epochs", "3"], ["--global-batch-size", "256"], ["--set", "spec.trainer.epochs=3"],
     ["--set", "spec.trainer={}"]],
)  # fmt: skip
def test_a_trainer_flag_with_a_script_is_refused_even_at_its_default(tmp_path, capsys, flags):
    path = tmp_path / "train.py"
    path.write_text("print(1)\n")
    assert run(["render", "--script", str(path), *flags]) == 2  # silently dropped before
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "spec.trainer" in err and "spec.args" in err


def test_a_spec_files_default_trainer_settings_do_not_stop_a_script(tmp_path, capsys):
    path = tmp_path / "train.py"
    path.write_text("print(1)\n")
    assert run(["render", EXAMPLE, "--script", str(path)]) == 0  # examples/mnist.yaml as a base
    assert "ConfigMap" in capsys.readouterr().out


# --- a program of several files (TensorFlow's tutorials: main.py + mnist_setup.py) ---------

KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
"""Kubernetes' rule for a ConfigMap key (IsConfigMapKey), besides '.', '..' and '..*'."""


def _tutorial_layout(root: Path) -> Path:
    root.mkdir()
    (root / "main.py").write_text("import mnist_setup\nfrom pkg import util\nprint(1)\n")
    (root / "mnist_setup.py").write_text("import os\nimport helpers\n")
    (root / "helpers.py").write_text("X = 1\n")
    (root / "pkg").mkdir()
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "util.py").write_text("Y = 2\n")
    (root / "unrelated.py").write_text("Z = 3\n")
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "helpers.cpython-311.pyc").write_bytes(b"\x00\xff")
    return root


def _config_map_and_volume(job) -> tuple[dict, dict]:
    objects = render.render(job)
    (config_map,) = [o for o in objects if o["kind"] == "ConfigMap"]
    (job_obj,) = [o for o in objects if o["kind"] == "Job"]
    (volume,) = [v for v in job_obj["spec"]["template"]["spec"]["volumes"] if v["name"] == "script"]
    return config_map, volume


def test_a_file_carries_the_modules_beside_it_that_it_imports_transitively(tmp_path):
    root = _tutorial_layout(tmp_path / "prog")
    job = load_job(EXAMPLE, [("spec.script", str(root / "main.py"))])
    assert job.spec.script.name == "main.py"
    assert sorted(job.spec.script.files) == [
        "helpers.py",
        "mnist_setup.py",
        "pkg/__init__.py",
        "pkg/util.py",
    ]  # fmt: skip  (not unrelated.py, not __pycache__)


def test_a_directory_carries_all_its_files_and_keeps_their_layout_in_the_config_map(tmp_path):
    root = _tutorial_layout(tmp_path / "prog")
    (root / "__pycache__" / "helpers.cpython-311.pyc").unlink()
    job = load_job(EXAMPLE, [("spec.script", str(root))])
    config_map, volume = _config_map_and_volume(job)
    items = {item["path"]: item["key"] for item in volume["configMap"]["items"]}
    assert sorted(items) == [
        "helpers.py", "main.py", "mnist_setup.py", "pkg/__init__.py", "pkg/util.py",
        "unrelated.py",
    ]  # fmt: skip
    for path, key in items.items():
        assert KEY.match(key) and not key.startswith("..") and "/" not in key, key
        assert config_map["data"][key] == (root / path).read_text()
    assert set(config_map["data"]) == set(items.values())
    args = _container(job)["args"]
    assert args[args.index("--") + 1 :] == ["python", f"{script.MOUNT_PATH}/main.py"]


def test_a_directory_without_main_py_names_the_fix(tmp_path):
    (tmp_path / "prog").mkdir()
    (tmp_path / "prog" / "train.py").write_text("print(1)\n")
    error = _error([("spec.script", str(tmp_path / "prog"))])
    assert error.field == "spec.script" and "main.py" in error.message
    assert "--script" in error.message


def test_the_size_limit_counts_every_file_and_says_so(tmp_path):
    root = tmp_path / "prog"
    root.mkdir()
    (root / "main.py").write_text("import big\n")
    (root / "big.py").write_text("#" * script.MAX_BYTES)
    error = _error([("spec.script", str(root / "main.py"))])
    assert "the program's 2 files" in error.message and "1 MiB" in error.message


def test_a_binary_file_in_the_directory_is_refused_by_name(tmp_path):
    root = _tutorial_layout(tmp_path / "prog")
    (root / "weights.bin").write_bytes(b"\xff\xfe\x00")
    error = _error([("spec.script", str(root))])
    assert "weights.bin is not UTF-8 text" in error.message


def test_the_files_of_a_multiworkerjob_are_checked_as_paths():
    document = yaml.safe_load(Path(EXAMPLE).read_text())
    document["spec"].pop("trainer")
    for bad in ("../x.py", "/etc/x.py", "a/.hidden.py", "main.py"):
        document["spec"]["script"] = {"name": "main.py", "source": "", "files": {bad: ""}}
        with pytest.raises(SpecError) as caught:
            job_from_document(document)
        assert caught.value.field == "spec.script.files", bad


def test_the_script_flag_names_the_job_after_the_directory_of_main_py(tmp_path, capsys):
    root = _tutorial_layout(tmp_path / "Keras_Tutorial")
    assert run(["render", "--script", str(root / "main.py")]) == 0
    documents = list(yaml.safe_load_all(capsys.readouterr().out))
    assert {d["metadata"]["name"] for d in documents if d["kind"] == "Service"} == {
        "keras-tutorial"
    }


@pytest.mark.parametrize("broken", ["main.py", "pkg/util.py"])
def test_a_syntax_error_in_any_file_is_exit_2_naming_file_and_line(tmp_path, capsys, broken):
    root = _tutorial_layout(tmp_path / "prog")
    path = root / broken
    path.write_text(path.read_text() + "def f(:\n")
    line = len(path.read_text().splitlines())
    assert run(["render", "--script", str(root / "main.py")]) == 2
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert err.startswith("tflaunch: error: spec.script")
    assert f"{broken}:{line}: invalid syntax" in err


SETS_TF_CONFIG = """\
import json, os
from os import environ
os.environ["TF_CONFIG"] = json.dumps({"cluster": {}, "task": {"index": 0}})
environ['TF_CONFIG'] = "{}"
os.environ.update(TF_CONFIG="{}")
os.environ.update({"TF_CONFIG": "{}", "OTHER": "1"})
os.putenv("TF_CONFIG", "{}")
"""

LEAVES_TF_CONFIG = """\
import json, os
config = json.loads(os.environ["TF_CONFIG"])
os.environ.setdefault("TF_CONFIG", "{}")
if "TF_CONFIG" not in os.environ:
    os.environ["TF_CONFIG"] = "{}"
os.environ["OTHER"] = "1"
os.environ.update(OTHER="1")
"""


def _program(tmp_path, source: str, rel: str = "train.py"):
    path = tmp_path / rel
    path.write_text(source)
    return load_job(EXAMPLE, [("spec.script", str(path))]).spec.script


def test_every_way_a_program_sets_tf_config_is_named_by_file_and_line(tmp_path):
    assert script_lint.tf_config_assignments(_program(tmp_path, SETS_TF_CONFIG)) == [
        f"train.py:{line}" for line in (3, 4, 5, 6, 7)
    ]


def test_reading_defaulting_or_filling_in_a_missing_tf_config_is_not_named(tmp_path):
    assert script_lint.tf_config_assignments(_program(tmp_path, LEAVES_TF_CONFIG)) == []


def test_a_program_that_sets_tf_config_is_warned_about_before_anything_is_sent(tmp_path, capsys):
    """The tutorials' notebooks build TF_CONFIG by hand; a script ported from them replaces
    the TF_CONFIG each worker gets, and every worker claims the same index."""
    (tmp_path / "setup.py").write_text('import os\nos.environ["TF_CONFIG"] = "{}"\n')
    path = tmp_path / "train.py"
    path.write_text("import setup\n")
    code = run(["submit", "--script", str(path), "--dry-run=client"])
    out, err = capsys.readouterr()
    assert code == 0 and "rendered (client dry run)" in out
    (line,) = [line for line in err.splitlines() if "sets TF_CONFIG" in line]
    assert line.startswith("tflaunch: warning: setup.py:2 sets TF_CONFIG"), err
    assert "if 'TF_CONFIG' not in os.environ" in line


ONE_MACHINE = """\
import tensorflow as tf
from tensorflow.distribute import OneDeviceStrategy
strategy = tf.distribute.MirroredStrategy()
other = OneDeviceStrategy("/cpu:0")
"""


@pytest.mark.parametrize(
    "uses_multi_worker",
    [
        "strategy = tf.distribute.MultiWorkerMirroredStrategy()",
        "strategy = tf.distribute.experimental.MultiWorkerMirroredStrategy()",
        "from tensorflow.distribute import MultiWorkerMirroredStrategy as MWMS",
        'strategy = getattr(tf.distribute, "MultiWorkerMirroredStrategy")()',
        "s = MirroredStrategy() if alone else tf.distribute.MultiWorkerMirroredStrategy()",
    ],
)
def test_a_program_with_a_multi_worker_strategy_is_not_named(tmp_path, uses_multi_worker):
    program = _program(tmp_path, f"import tensorflow as tf\n{uses_multi_worker}\n")
    assert script_lint.one_machine_strategies(program) is None


def test_each_one_machine_strategy_a_program_creates_is_named_by_file_and_line(tmp_path):
    assert script_lint.one_machine_strategies(_program(tmp_path, ONE_MACHINE)) == [
        "train.py:3 MirroredStrategy",
        "train.py:4 OneDeviceStrategy",
    ]
    assert script_lint.one_machine_strategies(_program(tmp_path, "print('no strategy')\n")) == []


def test_a_strategy_in_a_neighbour_module_counts_for_the_program(tmp_path):
    (tmp_path / "setup.py").write_text(
        "import tensorflow as tf\nstrategy = tf.distribute.MultiWorkerMirroredStrategy()\n"
    )
    assert script_lint.one_machine_strategies(_program(tmp_path, "import setup\n")) is None


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (ONE_MACHINE, "tflaunch: warning: the program creates only strategies of one "
                      "machine (train.py:3 MirroredStrategy, train.py:4 OneDeviceStrategy): "
                      "each of the 3 workers would train its own copy of the model, never "
                      "synchronized; create tf.distribute.MultiWorkerMirroredStrategy()"),
        ("print('no strategy')\n", "tflaunch: warning: no file of the program creates "
                                   "tf.distribute.MultiWorkerMirroredStrategy: each of the 3 "
                                   "workers would train its own copy of the model"),
    ],
)  # fmt: skip
def test_several_workers_without_a_multi_worker_strategy_are_warned_about(
    tmp_path, capsys, source, expected
):
    """MirroredStrategy (what the single-machine tutorials use) ignores TF_CONFIG: every
    worker trains alone, and the job succeeds. Said before anything is sent."""
    path = tmp_path / "train.py"
    path.write_text(source)
    code = run(["submit", "--script", str(path), "--workers", "3", "--dry-run=client"])
    out, err = capsys.readouterr()
    assert code == 0 and "rendered (client dry run)" in out
    (line,) = [line for line in err.splitlines() if line.startswith("tflaunch: warning:")]
    assert line.startswith(expected), line


def test_one_worker_needs_no_multi_worker_strategy(tmp_path, capsys):
    path = tmp_path / "train.py"
    path.write_text(ONE_MACHINE)
    assert run(["submit", "--script", str(path), "--workers", "1", "--dry-run=client"]) == 0
    assert "warning" not in capsys.readouterr().err


NO_SCOPE = """\
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
model.compile(loss="mse")
"""


@pytest.mark.parametrize(
    "enters",
    [
        "with strategy.scope():\n    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])",
        "tf.distribute.experimental_set_strategy(strategy)",
    ],
)
def test_a_program_that_enters_the_strategys_scope_is_not_named(tmp_path, enters):
    header = "import tensorflow as tf\nstrategy = tf.distribute.MultiWorkerMirroredStrategy()\n"
    program = _program(tmp_path, f"{header}{enters}\n")
    assert not script_lint.never_enters_a_scope(program)


def test_a_program_without_a_multi_worker_strategy_is_not_named_for_its_scope(tmp_path):
    """That is the warning above: one line for one mistake."""
    assert not script_lint.never_enters_a_scope(_program(tmp_path, ONE_MACHINE))


def test_a_model_built_outside_any_scope_is_warned_about_with_several_workers(tmp_path, capsys):
    """Keras' fit then trains with the default strategy: every worker its own copy, and the
    job succeeds (seen: the tutorial's program without its `with strategy.scope():` ended
    with different weights on its 2 workers)."""
    path = tmp_path / "train.py"
    path.write_text(NO_SCOPE)
    assert script_lint.never_enters_a_scope(_program(tmp_path, NO_SCOPE))
    assert run(["submit", "--script", str(path), "--workers", "2", "--dry-run=client"]) == 0
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert line.startswith(
        "tflaunch: warning: the program creates MultiWorkerMirroredStrategy but never enters "
        "strategy.scope()"
    ), line
    assert run(["submit", "--script", str(path), "--workers", "1", "--dry-run=client"]) == 0
    assert "warning" not in capsys.readouterr().err


CHIEF_SAVES = """\
import json, os
import numpy as np
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
task = json.loads(os.environ["TF_CONFIG"])["task"]
task_type, task_id = task["type"], task["index"]
if task_id == 0:
    model.save("/model/model.keras")
    np.save("/model/stats.npy", [1])
if task["index"] != 0:
    pass
else:
    model.save_weights("/model/w.weights.h5")
if not is_chief(task_type, task_id):
    print("a worker")
else:
    tf.saved_model.save(model, "/model/saved")
if task_type == "chief" and os.environ.get("SAVE"):
    checkpoint.save("/model/ckpt")
if task_id == 1:
    model.save("/tmp/not-the-chief.keras")
"""


def test_each_save_only_the_chief_makes_is_named_by_file_and_line(tmp_path):
    """Measured with the tutorial's program (TF 2.21): `if task_id == 0: model.save(...)`
    fails the chief in a collective (UnavailableError) once the other workers finished."""
    assert script_lint.chief_only_saves(_program(tmp_path, CHIEF_SAVES)) == [
        "train.py:10 save", "train.py:15 save_weights", "train.py:19 save", "train.py:21 save",
    ]  # fmt: skip


def test_a_save_every_worker_makes_is_not_named(tmp_path):
    """The tutorial's way: every worker saves, the chief to its path, the others elsewhere."""
    every_worker = (
        "import tensorflow as tf\nstrategy = tf.distribute.MultiWorkerMirroredStrategy()\n"
        "with strategy.scope():\n    model = tf.keras.Sequential()\n"
        "path = '/model' if is_chief else '/tmp/x'\nmodel.save(path)\n"
    )
    assert script_lint.chief_only_saves(_program(tmp_path, every_worker)) == []
    no_strategy = _program(tmp_path, "if is_chief:\n    model.save('x')\n")
    assert script_lint.chief_only_saves(no_strategy) == []


def test_a_chief_only_save_is_warned_about_by_submit_with_several_workers(tmp_path, capsys):
    path = tmp_path / "train.py"
    path.write_text(CHIEF_SAVES)
    assert run(["submit", "--script", str(path), "--workers", "2", "--dry-run=client"]) == 0
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert line.startswith(
        "tflaunch: warning: only the chief saves (train.py:10 save, train.py:15 save_weights, "
    ), line
    assert "let every worker save" in line
    assert run(["submit", "--script", str(path), "--workers", "1", "--dry-run=client"]) == 0
    assert "warning" not in capsys.readouterr().err

"""spec.trainer.precision, jitCompile and heartbeatTimeoutSeconds: checked in the spec,
passed to every worker as trainer flags only when set (the defaults leave the rendered
command unchanged)."""

from __future__ import annotations

import pytest

from launcher.core import workload
from launcher.core.errors import SpecError
from launcher.core.load import load_job

EXAMPLE = "examples/mnist.yaml"


def _args(overrides: list[tuple[str, object]]) -> list[str]:
    return workload.trainer_args(load_job(EXAMPLE, overrides), "/ckpt", "/model")


def test_the_defaults_add_no_flag_so_the_trainer_decides_from_its_device() -> None:
    job = load_job(EXAMPLE)
    assert job.spec.trainer.precision == "auto" and job.spec.trainer.jit_compile is False
    args = _args([])
    assert not {"--precision", "--jit-compile", "--heartbeat-timeout"} & set(args)


def test_precision_jit_compile_and_heartbeat_become_trainer_flags() -> None:
    args = _args(
        [
            ("spec.trainer.precision", "mixed"),
            ("spec.trainer.jitCompile", True),
            ("spec.trainer.heartbeatTimeoutSeconds", 5),
        ]
    )
    assert args[args.index("--precision") + 1] == "mixed"
    assert "--jit-compile" in args
    assert args[args.index("--heartbeat-timeout") + 1] == "5"


@pytest.mark.parametrize(
    ("overrides", "field", "hint"),
    [
        ([("spec.trainer.precision", "bf16")], "spec.trainer.precision", "auto, float32, mixed"),
        ([("spec.trainer.jitCompile", "yes")], "spec.trainer.jitCompile", "expected true or false"),
        (
            [("spec.trainer.heartbeatTimeoutSeconds", 1)],
            "spec.trainer.heartbeatTimeoutSeconds",
            "at least 2",
        ),
    ],
)
def test_a_bad_value_names_the_field_and_the_choices(
    overrides: list[tuple[str, object]], field: str, hint: str
) -> None:
    with pytest.raises(SpecError) as caught:
        load_job(EXAMPLE, overrides)
    assert caught.value.field == field and hint in str(caught.value)

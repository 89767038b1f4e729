"""A program of the user's (spec.command, spec.args, spec.script) or the built-in trainer.

The two are exclusive: spec.trainer configures only the built-in MNIST trainer, and args,
rendezvousTimeoutSeconds and stallTimeoutSeconds only a program of the user's (which the
worker wrapper runs). Mixing them is one SpecError naming the field. Called by
`load.validate`; kept apart so that the model (launcher.api.spec) imports none of its checks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from launcher.core import script, strategy_order
from launcher.core.errors import SpecError

if TYPE_CHECKING:  # spec imports this module
    from launcher.api.spec import JobSpec

FIELD_SCRIPT = "spec.script"
OWN_ONLY = ("args", "rendezvous_timeout_seconds", "stall_timeout_seconds")
"""JobSpec fields that apply only to a program of the user's."""


def own_program(spec: JobSpec) -> bool:
    """True when the workers run the user's program rather than the built-in trainer."""
    return bool(spec.command) or spec.script is not None or spec.entrypoint == "image"


_BUILT_IN_ONLY = (
    "configures only the built-in MNIST trainer, but spec.command/spec.script names your own "
    "program; pass your program's flags in spec.args instead"
)


def validate(spec: JobSpec) -> None:
    """The rules of a program of the user's; raise the first SpecError."""
    defaults = type(spec.trainer)()
    for f in dataclasses.fields(defaults):
        if getattr(spec.trainer, f.name) != getattr(defaults, f.name):
            raise SpecError(f"spec.trainer.{f.metadata['key']}", _BUILT_IN_ONLY)
    if spec.entrypoint == "image":
        _check_image_entrypoint(spec)
    for i, word in enumerate(spec.command):
        if not word or "\0" in word:
            raise SpecError(f"spec.command[{i}]", "must be a non-empty string")
    if spec.script is not None:
        script.check_name(spec.script.name)
        script.check_paths(spec.script)
        script.check_size(script.all_files(spec.script))
        script.check_compiles(spec.script)
        late = strategy_order.strategy_late_message(spec.script) if spec.workers > 1 else None
        if late is not None:  # it would fail on every worker at startup: said before they start
            raise SpecError(FIELD_SCRIPT, late)
    for name in ("rendezvous_timeout_seconds", "stall_timeout_seconds"):
        value = getattr(spec, name)
        if value is not None and value < 1:
            raise SpecError(f"spec.{_key(spec, name)}", f"must be at least 1, got {value}")


def check_overrides(spec: JobSpec, paths: Sequence[str]) -> None:
    """A spec.trainer field set on the command line (--epochs, --set spec.trainer.X) with a
    program of the user's is an error even at its default value, which `validate` cannot
    tell from unset: silently dropped, `--script train.py --epochs 3` would look obeyed."""
    if not own_program(spec):
        return
    for path in paths:
        if path == "spec.trainer" or path.startswith("spec.trainer."):
            raise SpecError(path, _BUILT_IN_ONLY)


def check_builtin_only(spec: JobSpec) -> None:
    """With the built-in trainer: none of the fields that belong to a program of the user's."""
    if spec.keras == "keras3":
        raise SpecError(
            "spec.keras",
            "the built-in trainer is written for tf-keras; keras3 applies to your own program "
            "(spec.command or spec.script): leave spec.keras out, or set it to auto or tf-keras",
        )
    for name in OWN_ONLY:
        if getattr(spec, name) not in ((), None):
            raise SpecError(
                f"spec.{_key(spec, name)}",
                "applies to your own program (spec.command or spec.script); the built-in "
                "trainer takes spec.trainer (extraArgs, rendezvousTimeoutSeconds, "
                "stallTimeoutSeconds)",
            )


def _key(spec: Any, name: str) -> str:
    """The file key (camelCase) of JobSpec field `name`."""
    return str(next(f.metadata["key"] for f in dataclasses.fields(spec) if f.name == name))


IMAGE_ENTRYPOINT_GUARANTEES = (
    "runs the image's own ENTRYPOINT, unwrapped: TF_CONFIG, peer names that resolve before "
    "the pods are Ready, env, backoffLimit and successPolicy apply; the worker wrapper's "
    "preflight (peers, GPUs), exit codes 75-79, restart in place and stall stop do not "
    "(write the container's command, e.g. [python, /train.py], to have them)"
)
"""The one line render/validate/submit print for spec.entrypoint: image (a TFJob with no
command): which of tflaunch's guarantees hold for a program tflaunch cannot wrap."""


def _check_image_entrypoint(spec: JobSpec) -> None:
    """What needs the worker wrapper cannot go with spec.entrypoint: image."""
    if spec.command or spec.script is not None:
        raise SpecError(
            "spec.entrypoint",
            "image runs the image's ENTRYPOINT, but spec.command/spec.script names a "
            "program: remove one",
        )
    if spec.restart == "inPlace":  # as written: unset, the job restarts by recreation
        raise SpecError(
            "spec.restart",
            "inPlace is done by the worker wrapper, which spec.entrypoint: image does not "
            "run: write the command (the program the ENTRYPOINT runs), or remove "
            "spec.restart (the pods are then recreated)",
        )
    for name in ("rendezvous_timeout_seconds", "stall_timeout_seconds"):
        if getattr(spec, name) is not None:
            raise SpecError(
                f"spec.{_key(spec, name)}",
                "is the worker wrapper's, which spec.entrypoint: image does not run: remove "
                "it, or write the command",
            )

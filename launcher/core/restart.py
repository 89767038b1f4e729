"""How a job's worker group restarts: spec.restart as written, or the default for the job.

A restart in place is done by the worker wrapper (`python -m trainer.run`): it relaunches
the program in its own pod and meets its peers at a barrier on the control port, the
TensorFlow port + 1. That works on any cluster (the container restart rule that also keeps
a killed container in its pod needs Kubernetes 1.35; without it that one case recreates
the pod), so in place is the default wherever the job has both the wrapper and that port.
Where it has not (spec.entrypoint: image runs the image's ENTRYPOINT unwrapped; spec.port
65535 leaves no port above it) the default is recreate: a user never meets an error for a
field they did not write. An inPlace written in the spec is kept as written, and
`launcher.core.validation` refuses it where the job cannot have it.

The one reading of the mode: render, the pod's environment, submit and the operator ask
`mode` (or `in_place`); only validation reads spec.restart itself, to refuse a written
inPlace the job cannot have.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from launcher.core import contract

if TYPE_CHECKING:  # spec's types only
    from launcher.api.spec import JobSpec, Restart

MAX_PORT = 65535


def possible(spec: JobSpec) -> bool:
    """Whether the job can restart in place: its workers run the wrapper, and the port above
    the TensorFlow port exists for the wrapper's barrier."""
    return spec.entrypoint != "image" and spec.port + contract.CONTROL_PORT_OFFSET <= MAX_PORT


def mode(spec: JobSpec) -> Restart:
    """spec.restart as written; unset: inPlace where `possible`, else recreate."""
    if spec.restart is not None:
        return spec.restart
    return "inPlace" if possible(spec) else "recreate"


def in_place(spec: JobSpec) -> bool:
    """Whether the group restarts in place (`mode`)."""
    return mode(spec) == "inPlace"

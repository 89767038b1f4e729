"""`trainer.progress.ProgressCallback`: the chief's progress lines, at most every few seconds
and at each epoch's end, with the rate measured after the first execution (tracing)."""

from __future__ import annotations

import io
import json

import pytest

from launcher.core import progress
from trainer.progress import ProgressCallback, is_chief


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def callback(clock: Clock, chief: bool = True) -> tuple[ProgressCallback, io.StringIO]:
    stream = io.StringIO()
    cb = ProgressCallback(global_batch_size=64, every_seconds=2.0, chief=chief, stream=stream,
                          clock=clock)  # fmt: skip
    cb.set_params({"epochs": 2, "steps": 10, "verbose": 0})
    return cb, stream


def lines(stream: io.StringIO) -> list[progress.Progress]:
    parsed = [progress.parse_line(line) for line in stream.getvalue().splitlines()]
    assert all(p is not None for p in parsed)
    return [p for p in parsed if p is not None]


def test_lines_come_after_the_first_execution_every_few_seconds_and_at_epoch_end() -> None:
    clock = Clock()
    cb, stream = callback(clock)
    cb.on_epoch_begin(0)
    for batch in range(1, 10, 2):  # steps_per_execution=2: hooks after steps 2, 4, ..., 10
        clock.now += 1.0
        cb.on_train_batch_end(batch, {"loss": 0.5})
    cb.on_epoch_end(0, {"loss": 0.4})
    cb.on_epoch_begin(1)
    clock.now += 1.0
    cb.on_train_batch_end(1, {"loss": 0.3})
    cb.on_epoch_end(1, {"loss": 0.2})
    shown = lines(stream)
    # The epoch's last step comes once, from on_epoch_end (with the epoch's loss).
    assert [p.position() for p in shown] == [(1, 2), (1, 6), (1, 10), (2, 10)]
    first, second = shown[0], shown[1]
    assert first.eta_seconds is None and first.images_per_sec is None  # no rate yet
    # 4 steps in 2 s after the first execution: 2 steps/s, 14 steps left.
    assert second.images_per_sec == pytest.approx(2 * 64)
    assert second.eta_seconds == pytest.approx(7.0)
    assert shown[-1].eta_seconds == 0 and shown[-1].loss == pytest.approx(0.2)


def test_only_the_chief_prints() -> None:
    clock = Clock()
    cb, stream = callback(clock, chief=False)
    cb.on_epoch_begin(0)
    cb.on_train_batch_end(0, {"loss": 1.0})
    cb.on_epoch_end(0, {"loss": 1.0})
    assert stream.getvalue() == ""


def _tf_config(task_type: str, index: int, chief: bool = False) -> dict[str, str]:
    cluster = {"worker": ["a:1", "b:1"], **({"chief": ["c:1"]} if chief else {})}
    task = {"type": task_type, "index": index}
    return {"TF_CONFIG": json.dumps({"cluster": cluster, "task": task})}


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, True),  # a single worker
        (_tf_config("worker", 0), True),
        (_tf_config("worker", 1), False),
        (_tf_config("worker", 0, chief=True), False),
        (_tf_config("chief", 0, chief=True), True),
    ],
)
def test_the_chief_is_tf_configs_chief_or_worker_0(env: dict[str, str], expected: bool) -> None:
    assert is_chief(env) is expected


def test_numpy_numbers_from_keras_make_a_valid_line() -> None:
    import numpy as np

    clock = Clock()
    cb, stream = callback(clock)
    cb.on_epoch_begin(np.int64(1))  # a resumed fit hands numpy integers
    cb.on_train_batch_end(np.int64(3), {"loss": np.float32(0.25)})
    (shown,) = lines(stream)
    assert shown.position() == (2, 4) and shown.loss == pytest.approx(0.25)


class CountedLoss:
    """A loss as Keras hands it to batch hooks (a tensor): reading it is a host sync."""

    def __init__(self, value: float) -> None:
        self.value = value
        self.reads = 0

    def __float__(self) -> float:
        self.reads += 1
        return self.value


def test_the_loss_is_read_from_the_device_only_when_a_line_is_printed() -> None:
    clock = Clock()
    cb, stream = callback(clock)
    assert cb._supports_tf_logs, "Keras must hand the batch hooks tensors, not numpy"
    loss = CountedLoss(0.5)
    cb.on_epoch_begin(0)
    for batch in range(9):  # 9 hooks, 0.5 s apart: printed after the first and every 2 s
        clock.now += 0.5
        cb.on_train_batch_end(batch, {"loss": loss})
    printed = len(lines(stream))
    assert printed == 3 and loss.reads == printed, (printed, loss.reads)


class Strategy:
    num_replicas_in_sync = 2


class Model:
    distribute_strategy = Strategy()
    distribute_reduction_method = "auto"


def test_the_mid_epoch_loss_of_two_replicas_is_what_one_worker_shows_not_their_sum() -> None:
    clock = Clock()
    cb, stream = callback(clock)
    cb.model = Model()  # tf_keras sums the batch logs over the 2 replicas: 0.9 + 0.9
    cb.on_epoch_begin(0)
    cb.on_train_batch_end(0, {"loss": 1.8})
    cb.on_epoch_end(0, {"loss": 0.8})  # the metrics' result: a mean already
    assert [p.loss for p in lines(stream)] == [pytest.approx(0.9), pytest.approx(0.8)]

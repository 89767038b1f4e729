"""A picture of training from result.json: loss and accuracy per epoch, train and test,
restarts marked; one column per run.

The chief draws its run's `curves.png` beside result.json when training ends, and
`tflaunch plot A.json B.json` draws several runs side by side (1 vs 2 workers, a run with a
restart), each column on the same axes as the others so that they compare at a glance.

matplotlib is an optional extra (`pip install 'tflaunch[plot]'`), imported only inside
`draw()`: `tflaunch` itself never pays for it, and a missing one is `PlotUnavailable` with
the install line. Figures are drawn on matplotlib's Agg canvas directly, without pyplot:
no global figure state, no display needed.
"""

from __future__ import annotations

import dataclasses
import io
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

INSTALL_HINT = "pip install 'tflaunch[plot]'"
COLUMN_WIDTH_PX = 560
"""Width of one run's column in the PNG."""
HEIGHT_PX = 720
DPI = 100
TRAIN_COLOR = "#1f77b4"
TEST_COLOR = "#d62728"
RESTART_COLOR = "#7f7f7f"


class PlotUnavailable(ImportError):
    """matplotlib is not installed."""


@dataclasses.dataclass(frozen=True)
class Curves:
    """One run's per-epoch values, as result.json records them (None: not measured)."""

    label: str
    loss: tuple[float | None, ...]
    accuracy: tuple[float | None, ...]
    test_loss: tuple[float | None, ...]
    test_accuracy: tuple[float | None, ...]
    restarts: tuple[tuple[int, int], ...]
    """(epoch, restart number): the epoch (1-based) that restart `number` began with."""
    caption: str

    @property
    def epochs(self) -> int:
        return len(self.loss)


def _floats(values: Any, count: int) -> tuple[float | None, ...]:
    items = list(values) if isinstance(values, list | tuple) else []
    out: list[float | None] = []
    for item in (items + [None] * count)[:count]:
        try:
            number = float(item)
        except (TypeError, ValueError):
            number = math.nan
        out.append(None if item is None or math.isnan(number) else number)
    return tuple(out)


def curves_of(result: Mapping[str, Any], label: str) -> Curves:
    """The curves in one result.json (older files without test or restart lists included:
    their final test score stands at the last epoch).

    Raises:
        ValueError: the result has no per-epoch history.
    """
    history = result.get("history")
    if not isinstance(history, Mapping) or not history.get("loss"):
        raise ValueError("has no per-epoch history (history.loss); is it a tflaunch result.json?")
    count = len(history["loss"])
    test_loss = _floats(history.get("test_loss"), count)
    test_accuracy = _floats(history.get("test_accuracy"), count)
    if not any(v is not None for v in test_accuracy) and "test_accuracy" in result:
        test_accuracy = (*test_accuracy[:-1], _floats([result.get("test_accuracy")], 1)[0])
        test_loss = (*test_loss[:-1], _floats([result.get("test_loss")], 1)[0])
    attempts = [
        int(r) if isinstance(r, int | float) else None for r in history.get("restart") or []
    ]
    restarts = []
    previous = attempts[0] if attempts else None
    for epoch, attempt in enumerate(attempts[1:], start=2):
        if attempt is not None and previous is not None and attempt > previous:
            restarts.append((epoch, attempt))
        previous = attempt if attempt is not None else previous
    total = result.get("restarts")  # older results have no per-epoch restarts: caption only
    caption = ", ".join(
        part
        for part in (
            f"{result['workers']} worker(s)" if "workers" in result else "",
            f"batch {result['global_batch_size']}" if "global_batch_size" in result else "",
            f"test acc {float(result['test_accuracy']):.4f}" if "test_accuracy" in result else "",
            f"{float(result['images_per_sec']):.0f} img/s" if "images_per_sec" in result else "",
            f"{total} restart(s)" if isinstance(total, int) and total else "",
        )
        if part
    )
    return Curves(
        label=label,
        loss=_floats(history.get("loss"), count),
        accuracy=_floats(history.get("accuracy"), count),
        test_loss=test_loss,
        test_accuracy=test_accuracy,
        restarts=tuple(restarts),
        caption=caption,
    )


def size_px(runs: int) -> tuple[int, int]:
    """(width, height) of the PNG for `runs` runs."""
    return COLUMN_WIDTH_PX * max(1, runs), HEIGHT_PX


def _figure(width_px: int, height_px: int) -> Any:
    """A matplotlib Figure on its own Agg canvas (no pyplot, no global state).

    Raises:
        PlotUnavailable: matplotlib is not installed.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise PlotUnavailable(f"drawing needs matplotlib: {INSTALL_HINT}") from None
    figure = Figure(figsize=(width_px / DPI, height_px / DPI), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def warm_up() -> None:
    """Import matplotlib and render a small figure with text to memory: its font cache and
    the Agg canvas are loaded, so the next `draw` takes a fraction of the first's time.

    Raises:
        PlotUnavailable: matplotlib is not installed.
    """
    figure = _figure(200, 100)
    axes = figure.subplots()
    axes.plot([0, 1], [0, 1], label="train")
    axes.set_title("warm-up", fontsize=9)
    axes.legend(fontsize=8)
    figure.savefig(io.BytesIO(), format="png", dpi=DPI)


def draw(runs: Sequence[Curves], path: Path | str, title: str | None = None) -> Path:
    """Write a PNG: one column per run, loss on top and accuracy below, train and test.

    Raises:
        PlotUnavailable: matplotlib is not installed.
    """
    figure = _figure(*size_px(len(runs)))
    axes = figure.subplots(2, max(1, len(runs)), squeeze=False, sharex="col", sharey="row")
    for column, run in enumerate(runs):
        top, bottom = axes[0][column], axes[1][column]
        # Restart labels where the curves are not: loss falls, accuracy rises.
        _panel(top, run, run.loss, run.test_loss, "loss", label_at=1.0)
        _panel(bottom, run, run.accuracy, run.test_accuracy, "accuracy", label_at=0.0)
        top.set_title(f"{run.label}\n{run.caption}", fontsize=9)
        bottom.set_xlabel("epoch")
    axes[0][0].set_ylabel("loss")
    axes[1][0].set_ylabel("accuracy")
    if title:
        figure.suptitle(title, fontsize=11)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(target, format="png", dpi=DPI)
    return target


def _panel(
    axes: Any,
    run: Curves,
    train: Sequence[float | None],
    test: Sequence[float | None],
    what: str,
    label_at: float,
) -> None:
    epochs = list(range(1, run.epochs + 1))
    for values, name, color, style in (
        (train, "train", TRAIN_COLOR, "-"),
        (test, "test", TEST_COLOR, "--"),
    ):
        points = [(e, v) for e, v in zip(epochs, values, strict=True) if v is not None]
        if points:
            xs, ys = zip(*points, strict=True)
            axes.plot(xs, ys, style, color=color, marker="o", markersize=4, label=f"{name} {what}")
    for epoch, number in run.restarts:
        axes.axvline(epoch - 0.5, color=RESTART_COLOR, linestyle=":", linewidth=1.5)
        axes.annotate(
            f"restart {number}",
            xy=(epoch - 0.5, label_at),
            xycoords=("data", "axes fraction"),
            xytext=(3, -12 if label_at else 4),
            textcoords="offset points",
            color=RESTART_COLOR,
            fontsize=8,
        )
    axes.grid(True, alpha=0.3)
    axes.set_xticks(epochs if run.epochs <= 20 else epochs[:: max(1, run.epochs // 10)])
    axes.legend(loc="best", fontsize=8)

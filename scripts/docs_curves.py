"""Draw docs/images/curves.png and docs/images/plot-clean-vs-restart.png from real runs.

Usage: python scripts/docs_curves.py [--data MNIST.npz] [--out-dir docs/images]

It runs the real CLI on this machine:
1. `tflaunch local`, 2 workers, 5 epochs: the chief's own curves.png is copied as is;
2. the same, with worker 1 killed (SIGKILL) once the first checkpoint exists: the group
   restarts and resumes, and its result marks the restart;
3. `tflaunch plot` of both results side by side.
Without --data it generates a synthetic MNIST-format file (trainer.synthetic: learnable
patterns, not digits), so it works offline; the pictures say which data they show.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from first_run_transcript import (
    RUN_TIMEOUT_SECONDS,
    synthetic_mnist,
    tflaunch_local,
    user_env,
    wait_for_checkpoint,
    worker_pids,
)

REPO = Path(__file__).resolve().parents[1]
EPOCHS = "5"


def run_local(directory: Path, data: Path, name: str, kill_once: bool) -> Path:
    """One run of 2 workers; its result.json."""
    args = ["--workers", "2", "--epochs", EPOCHS, "--data", str(data), "--workdir", f"runs/{name}"]
    launcher = subprocess.Popen(
        tflaunch_local(*args), cwd=directory, env=user_env(),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        if kill_once:
            wait_for_checkpoint(directory / "runs" / name / "checkpoints", launcher)
            os.kill(worker_pids(launcher.pid)[1], signal.SIGKILL)
        output, _ = launcher.communicate(timeout=RUN_TIMEOUT_SECONDS)
    finally:
        launcher.kill()
    if launcher.returncode != 0:
        sys.exit(f"docs_curves: the {name} run failed:\n{output}")
    return directory / "runs" / name / "model" / "result.json"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, help="an mnist.npz (default: synthetic)")
    parser.add_argument("--out-dir", type=Path, default=REPO / "docs" / "images")
    options = parser.parse_args(argv)
    options.out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tflaunch-curves-") as temporary:
        directory = Path(temporary)
        data = options.data.resolve() if options.data else synthetic_mnist(directory)
        what = "MNIST" if options.data else "synthetic MNIST-format data (not digits)"
        clean = run_local(directory, data, "clean", kill_once=False)
        killed = run_local(directory, data, "killed", kill_once=True)
        shutil.copyfile(clean.parent / "curves.png", options.out_dir / "curves.png")
        subprocess.run(
            [sys.executable, "-m", "launcher", "plot", str(clean), str(killed),
             "--label", "2 workers", "--label", "2 workers, worker 1 killed once",
             "--title", f"tflaunch local, {what}",
             "-o", str(options.out_dir / "plot-clean-vs-restart.png")],
            check=True, cwd=REPO, env=user_env(),
        )  # fmt: skip
    print(f"wrote {options.out_dir / 'curves.png'}")


if __name__ == "__main__":
    main()

"""The group's generation kept on the checkpoint volume per Job (`trainer.generation_file`):
what a plain Job's recreated pods continue from, and what a new Job must not."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from launcher.core import in_place
from trainer import generation_file
from trainer.generation_file import Keeper, Stored

UID = "6f1c2a9e-0d3b-4c47-9a51-1b2f3e4d5c6a"


def test_what_a_worker_stored_for_its_job_is_read_back(tmp_path: Path) -> None:
    stored = Stored(2, ((1, "Epoch 2/5 (the program was killed by SIGKILL)"),), 2)
    generation_file.write(str(tmp_path), 1, UID, stored)
    assert generation_file.read(str(tmp_path), 1, UID) == stored
    assert list(tmp_path.iterdir()) == [tmp_path / ".tflaunch-generation-1.json"]


def test_a_new_job_with_the_same_directory_starts_at_0(tmp_path: Path) -> None:
    """spec.checkpoint.run naming an earlier run: the same directory, a new uid."""
    generation_file.write(str(tmp_path), 0, UID, Stored(3))
    assert generation_file.read(str(tmp_path), 0, "another-jobs-uid") is None
    assert Keeper(str(tmp_path), 0, "another-jobs-uid").generation == 0


def test_each_worker_reads_only_its_own_file(tmp_path: Path) -> None:
    generation_file.write(str(tmp_path), 0, UID, Stored(3))
    assert generation_file.read(str(tmp_path), 1, UID) is None


@pytest.mark.parametrize(
    "text",
    ["", "{", "[]", json.dumps({"jobUid": UID}), json.dumps(
        {"jobUid": UID, "generation": -1, "restart": 0, "failed": []})],
)  # fmt: skip
def test_an_unreadable_file_is_nothing_stored(tmp_path: Path, text: str) -> None:
    generation_file.path(str(tmp_path), 0).write_text(text)
    assert generation_file.read(str(tmp_path), 0, UID) is None


def test_without_a_uid_or_a_directory_nothing_is_kept(tmp_path: Path) -> None:
    """`tflaunch local`, an older cluster, a wrapper run by hand: today's generation 0."""
    generation_file.write(str(tmp_path), 0, "", Stored(1))
    generation_file.write(None, 0, UID, Stored(1))
    assert list(tmp_path.iterdir()) == []
    assert generation_file.read(None, 0, UID) is None


def test_a_write_that_fails_is_logged_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="tflaunch.worker"):
        generation_file.write(str(tmp_path / "missing"), 0, UID, Stored(1))
    assert "a recreated group starts at 0" in caplog.text


def test_a_generation_entered_without_a_named_restart_keeps_the_last_one() -> None:
    """A peer's pod replaced names no failed program: the last named restart stays."""
    first = generation_file.entered(None, 1, [(1, "boom (the program exited 1)")])
    assert first == Stored(1, ((1, "boom (the program exited 1)"),), 1)
    assert generation_file.entered(first, 2, []) == Stored(2, first.failed, 1)
    assert generation_file.entered(None, 0, []) == Stored(0)


def test_the_keeper_continues_and_names_the_last_restart_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keeper = Keeper(str(tmp_path), 1, UID)
    assert keeper.generation == 0
    keeper.entered(0, [])
    keeper.entered(1, [(1, "Epoch 2/5 (the program was killed by SIGKILL)")])
    keeper.entered(2, [])
    again = Keeper(str(tmp_path), 1, UID)  # the pod recreated
    assert again.generation == 2
    again.say_last_restart()
    (restart,) = in_place.restarts(capsys.readouterr().out.splitlines())
    assert restart.words() == "restart in place 1: worker 1 was killed by SIGKILL: Epoch 2/5"


def test_a_keeper_with_nothing_stored_says_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    Keeper(str(tmp_path), 0, UID).say_last_restart()
    assert capsys.readouterr().out == ""

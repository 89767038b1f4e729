"""What a worker says when told to stop (SIGTERM, which `tflaunch local` also sends on
Ctrl-C): when the save comes, with steps_per_execution in mind, and nothing about a restart
(after a Ctrl-C nothing restarts; on a cluster the launcher says what follows)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.tf
preemption = pytest.importorskip("trainer.preemption")


def test_one_step_per_execution_saves_after_the_next_step() -> None:
    assert preemption.when_saved(1) == (
        "every worker saves at the next step boundary they all reach (the step after this one)"
    )


def test_with_several_steps_per_execution_the_save_is_up_to_two_executions_away() -> None:
    """PreemptionCheckpointHandler saves at the end of the execution after the current one."""
    words = preemption.when_saved(32)
    assert "the end of the execution after this one, up to 64 steps from now" in words
    assert "steps run 32 at a time, --steps-per-execution" in words


def test_the_saved_line_names_the_step_and_promises_no_restart(tmp_path) -> None:
    backup = preemption.PreemptionBackup(str(tmp_path), "epoch", preemption.SigtermFlag(), 40)
    backup._current_epoch, backup._last_batch = 1, 29
    with pytest.raises(preemption.Preempted) as caught:
        backup._exit()
    assert str(caught.value) == (
        "preempted: every worker saved at step 70 (epoch 2, step 30 of 40); exiting 79: the "
        "group resumes there when it runs again"
    )
    assert "restart" not in str(caught.value)


def test_a_peer_lost_mid_training_says_it_may_be_retried_not_that_it_restarts() -> None:
    import tensorflow as tf

    from trainer import train

    error = train._transient("training", tf.errors.UnavailableError(None, None, "peer gone"))
    assert str(error) == (
        "training failed because a peer died, froze or restarted (UnavailableError: peer gone); "
        "exiting 1, which may be retried: a restarted group resumes from the last checkpoint"
    )

"""What the operator makes of a spec.script program's own code, as the CLI does: a strategy
created too late is an invalid spec (no Job created), and the Keras the children run on is
the CLI's choice."""

from __future__ import annotations

from tests.operator.sim import Cluster, resource

LATE = (
    "import tensorflow as tf\n"
    "ds = tf.data.Dataset.range(4)\n"
    "strategy = tf.distribute.MultiWorkerMirroredStrategy()\n"
)


def test_a_strategy_created_late_on_two_workers_fails_naming_the_line_and_creates_nothing():
    cluster = Cluster(resource({"script": {"name": "train.py", "source": LATE}}))
    cluster.settle()
    assert (cluster.status.phase, cluster.status.reason) == ("Failed", "InvalidSpec")
    assert "train.py:2 tf.data.Dataset.range runs TensorFlow before train.py:3" in (
        cluster.status.message
    )
    assert "create the strategy at program start" in cluster.status.message
    assert not cluster.jobs


def test_the_children_run_on_the_keras_the_program_is_written_for():
    program = "import keras\nstrategy = None\n"
    cluster = Cluster(resource({"workers": 1, "script": {"name": "train.py", "source": program}}))
    cluster.reconcile()
    (container,) = cluster.job()["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["TF_USE_LEGACY_KERAS"] == "0"

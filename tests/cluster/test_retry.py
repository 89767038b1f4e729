"""Backoff, the outage notice and `retrying`: the policy for an unavailable API server."""

from __future__ import annotations

import random

import pytest

from launcher.cluster.retry import MAX_DELAY, MAX_RETRY_AFTER, Backoff, Outage, retrying
from launcher.core.errors import ClusterUnreachable, Forbidden, Unavailable


def test_backoff_doubles_up_to_its_cap_with_jitter_below_each_step() -> None:
    backoff = Backoff(random.Random(1))
    delays = [backoff.next() for _ in range(8)]
    steps = [0.5, 1, 2, 4, 8, 8, 8, 8]
    for delay, step in zip(delays, steps, strict=True):
        assert step / 2 <= delay <= step
    assert max(delays) <= MAX_DELAY
    backoff.reset()
    assert backoff.next() <= 0.5


def test_backoff_waits_at_least_the_servers_retry_after_but_not_forever() -> None:
    backoff = Backoff(random.Random(1))
    assert backoff.next(retry_after=5) >= 5
    assert backoff.next(retry_after=3600) == MAX_RETRY_AFTER


def test_an_outage_is_announced_once_and_its_end_once() -> None:
    said: list[str] = []
    outage = Outage("https://k8s:6443", said.append)
    error = ClusterUnreachable("cannot reach", short="connection refused")
    outage.began(error)
    outage.began(error)
    outage.ended()
    outage.ended()
    assert len(said) == 2
    assert said[0].startswith("the API server at https://k8s:6443 is unavailable since ")
    assert "(connection refused); retrying until it is back" in said[0]
    assert said[1].startswith("the API server is back after ")


def test_retrying_calls_again_after_transient_failures() -> None:
    answers: list[Exception | str] = [
        Unavailable("busy", short="429"),
        ClusterUnreachable("x"),
        "ok",
    ]
    slept: list[float] = []

    def call() -> str:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    said: list[str] = []
    assert retrying(call, Outage("s", said.append), sleep=slept.append) == "ok"
    assert len(slept) == 2
    assert len(said) == 2  # unavailable ..., back after ...


def test_retrying_raises_other_errors_at_once_and_transient_ones_past_the_deadline() -> None:
    def forbidden() -> None:
        raise Forbidden("no")

    with pytest.raises(Forbidden):
        retrying(forbidden, Outage("s", print), sleep=lambda _: None)

    def down() -> None:
        raise ClusterUnreachable("down")

    with pytest.raises(ClusterUnreachable):
        retrying(down, Outage("s", lambda _: None), deadline=0.0, sleep=lambda _: None)


def test_an_outage_ends_only_when_every_failing_stream_is_back() -> None:
    said: list[str] = []
    outage = Outage("s", said.append)
    jobs, pods = object(), object()
    outage.began(Unavailable("busy", short="503"), jobs)
    outage.began(Unavailable("busy", short="429"), pods)
    outage.ended(jobs)
    assert len(said) == 1
    outage.ended(pods)
    assert len(said) == 2 and said[1].startswith("the API server is back")

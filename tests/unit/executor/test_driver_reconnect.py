"""How soon the executor driver asks again for an agent that refuses connections."""

from __future__ import annotations

import pytest

from mesilla.executor.driver import Executor, ExecutorDriver


def _driver(backoff_max: str) -> ExecutorDriver:
    return ExecutorDriver(
        Executor(),
        {
            "MESOS_FRAMEWORK_ID": "fw",
            "MESOS_EXECUTOR_ID": "ex",
            "MESOS_AGENT_ENDPOINT": "127.0.0.1:5051",
            "MESOS_CHECKPOINT": "1",
            "MESOS_SUBSCRIPTION_BACKOFF_MAX": backoff_max,
        },
    )


def _polls(driver: ExecutorDriver, outage: float) -> list[float]:
    return [driver._agent_poll(outage) for _ in range(200)]


@pytest.mark.parametrize(
    ("outage", "wait"),
    [
        (0.0, 0.1),  # a restarting agent is noticed within 0.1 s ...
        (1.0, 0.1),
        (10.0, 0.5),  # ... a long outage is polled more and more slowly ...
        (600.0, 2.0),  # ... never slower than MESOS_SUBSCRIPTION_BACKOFF_MAX
    ],
)
def test_refused_agent_is_polled_after_a_share_of_the_outage(outage: float, wait: float) -> None:
    polls = _polls(_driver("2secs"), outage)
    assert all(wait / 2 <= poll <= wait for poll in polls)


def test_the_polls_are_spread_so_executors_do_not_knock_together() -> None:
    polls = _polls(_driver("2secs"), 10.0)
    assert len(set(polls)) > 1
    assert min(polls) < 0.4 < max(polls)


def test_the_backoff_maximum_bounds_the_poll_too() -> None:
    assert all(0.025 <= poll <= 0.05 for poll in _polls(_driver("50ms"), 0.0))

"""The log throttle with a fake clock: the first line of a kind goes out, then one per interval
carrying the count suppressed meanwhile; kinds are independent; a reset logs the next at once."""
from __future__ import annotations

import logging

import pytest

from curvine_py.worker.throttle import LogThrottle, log_throttled


class Clock:
    def __init__(self) -> None:
        self.now = 10.0

    def __call__(self) -> float:
        return self.now


def test_one_line_per_interval_per_kind_with_the_suppressed_count(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    throttle = LogThrottle(5.0, clock)
    logger = logging.getLogger("test.throttle")
    caplog.set_level(logging.INFO, logger="test.throttle")
    for _ in range(50):                       # 50 failures in 2.5 s, then 50 more in the next 2.5 s
        log_throttled(logger, throttle, "a", logging.ERROR, "accept failed: %s", "EMFILE")
        clock.now += 0.1
    log_throttled(logger, throttle, "b", logging.WARNING, "other kind")
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["accept failed: EMFILE", "other kind"]
    clock.now += 0.1                           # 5.1 s after the first: the next one goes out
    log_throttled(logger, throttle, "a", logging.ERROR, "accept failed: %s", "EMFILE")
    assert caplog.records[-1].getMessage() == "accept failed: EMFILE (49 similar lines suppressed)"
    assert throttle.allow("a") is None and throttle.reset("a") == 1 and throttle.allow("a") == 0

"""master/standby.py's wait for the leadership, with a fake engine opener and no clock."""
from __future__ import annotations

import threading

import pytest

from curvine_py.core.errors import CurvineError, NotLeader, Unavailable
from curvine_py.master.follower import LeaderHint
from curvine_py.master.standby import wait_for_leadership


class _Stop(threading.Event):
    """A stop event whose wait() never sleeps: it counts the retries instead."""

    def __init__(self, stop_after: int | None = None) -> None:
        super().__init__()
        self.waits = 0
        self._stop_after = stop_after

    def wait(self, timeout: float | None = None) -> bool:
        self.waits += 1
        if self._stop_after is not None and self.waits >= self._stop_after:
            self.set()
        return self.is_set()


def test_follows_the_hint_until_the_lock_is_free() -> None:
    answers: list[Exception | str] = [NotLeader("a:1"), Unavailable("database down"), NotLeader("b:2"), "ns"]
    seen: list[str] = []
    hint = LeaderHint()

    def opener() -> str:
        seen.append(hint.get())
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    stop = _Stop()
    announced: list[str] = []
    assert wait_for_leadership(opener, hint, stop, on_standby=lambda: announced.append(hint.get())) == "ns"
    assert seen == ["", "a:1", "a:1", "b:2"]      # an unreachable database keeps the last leader known
    assert stop.waits == 3
    assert announced == ["a:1"]                   # once, after the first refusal named the leader


def test_stop_ends_the_wait_without_leading() -> None:
    def opener() -> str:
        raise NotLeader("a:1")

    assert wait_for_leadership(opener, LeaderHint(), _Stop(stop_after=2)) is None


def test_an_unreachable_database_at_the_first_try_is_not_retried() -> None:
    def opener() -> str:
        raise Unavailable("cannot connect to the metadata database")

    with pytest.raises(Unavailable, match="cannot connect"):
        wait_for_leadership(opener, LeaderHint(), _Stop())


def test_other_errors_are_not_retried() -> None:
    def opener() -> str:
        raise CurvineError("password authentication failed")

    with pytest.raises(CurvineError, match="password"):
        wait_for_leadership(opener, LeaderHint(), _Stop())

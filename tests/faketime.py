"""A clock that moves only when the code under test sleeps (inject `clock` and `sleep`)."""
from __future__ import annotations


class FakeTime:
    def __init__(self, start: float = 100.0) -> None:
        self.now = start
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

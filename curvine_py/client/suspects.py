"""Workers that just failed a request (timed out, unreachable, overloaded): for a short while they
are tried after the others, so a partitioned or overloaded worker costs one deadline, not one per
request, until the membership view drops it (or it answers again)."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from curvine_py.core.errors import InvalidArgument

W = TypeVar("W")
DEFAULT_HOLD_S = 5.0   # longer than a membership refresh plus a worker lease, in tests and by default


class Suspects:
    def __init__(self, hold_s: float = DEFAULT_HOLD_S, clock: Callable[[], float] = time.monotonic) -> None:
        if hold_s < 0:
            raise InvalidArgument(f"suspect hold of {hold_s} s")
        self._hold_s = hold_s
        self._clock = clock
        self._until: dict[str, float] = {}
        self._lock = threading.Lock()

    def mark(self, worker_id: str) -> None:
        with self._lock:
            self._until[worker_id] = self._clock() + self._hold_s

    def clear(self, worker_id: str) -> None:
        """It answered: no longer suspect."""
        if worker_id in self._until:
            with self._lock:
                self._until.pop(worker_id, None)

    def suspect(self, worker_id: str) -> bool:
        with self._lock:
            until = self._until.get(worker_id)
            if until is None:
                return False
            if until <= self._clock():
                del self._until[worker_id]
                return False
            return True

    def order(self, workers: Sequence[W], worker_id: Callable[[W], str]) -> list[W]:
        """`workers` with the suspects moved to the end (each group in its given order)."""
        if not self._until:   # the common case costs one dict test
            return list(workers)
        trusted: list[W] = []
        doubted: list[W] = []
        for worker in workers:
            (doubted if self.suspect(worker_id(worker)) else trusted).append(worker)
        return trusted + doubted

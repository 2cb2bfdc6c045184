"""Rate-limited logging of repeated errors: the first line of a kind goes out, then at most one per
`interval_s`, carrying how many were suppressed meanwhile. Why: a failure that repeats every 100 ms
(an accept loop out of fds, a master that is down, a failing eviction pass) must not flood the log
and the disk under it, yet must stay visible.

The clock is injected (monotonic seconds) so tests drive it without sleeping.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

DEFAULT_INTERVAL_S = 10.0

Monotonic = Callable[[], float]


class LogThrottle:
    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S, clock: Monotonic = time.monotonic) -> None:
        self._interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def allow(self, kind: str) -> int | None:
        """None: suppress this line. Otherwise log it; the number is how many lines of this kind
        were suppressed since the last one that went out."""
        now = self._clock()
        with self._lock:
            last = self._last.get(kind)
            if last is not None and now - last < self._interval_s:
                self._suppressed[kind] = self._suppressed.get(kind, 0) + 1
                return None
            self._last[kind] = now
            return self._suppressed.pop(kind, 0)

    def reset(self, kind: str) -> int:
        """The failure is over: the next one logs at once. Returns the lines still suppressed."""
        with self._lock:
            self._last.pop(kind, None)
            return self._suppressed.pop(kind, 0)


def log_throttled(logger: logging.Logger, throttle: LogThrottle, kind: str, level: int, message: str,
                  *args: object, exc_info: bool = False) -> None:
    """`logger.log(level, message, *args)` unless `throttle` suppresses this `kind` of line now; a
    line that goes out says how many were suppressed before it."""
    suppressed = throttle.allow(kind)
    if suppressed is None:
        return
    if suppressed:
        message += " (%d similar lines suppressed)"
        args = (*args, suppressed)
    logger.log(level, message, *args, exc_info=exc_info)

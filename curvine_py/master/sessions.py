"""Which client sessions are alive, so orphans kept by a dead mount can be let go.

A mount keeps an unlinked file it still has open as an orphan (Unlink/Rename keep_orphan) and frees
it with ReleaseOrphan at the last close. A mount that is killed never sends that: without this the
orphan's blocks would stay forever. Mounts heartbeat with RenewDirLeases (every third of the
timeout, which the reply tells them); a session not heard from for `timeout_s` is dead, and the
master releases its orphans (they then go through the unlink grace like any nameless file).

Memory only. After a (re)start nobody is judged for one timeout, so live mounts get the chance to
heartbeat the new master first.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable


class Sessions:
    def __init__(self, timeout_s: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout_s = timeout_s
        self._clock = clock
        self._started = clock()
        self._last_seen: dict[str, float] = {}
        self._lock = threading.Lock()

    def seen(self, session: str) -> None:
        if session:
            with self._lock:
                self._last_seen[session] = self._clock()

    def can_judge(self) -> bool:
        """False during the first timeout after start: a live session may not have called yet."""
        return self._clock() - self._started >= self.timeout_s

    def dead(self, session: str) -> bool:
        now = self._clock()
        with self._lock:
            last = self._last_seen.get(session)
            if last is not None and now - last >= self.timeout_s:
                del self._last_seen[session]      # forgotten: bounded by the live sessions
                return True
            return last is None

"""Which client sessions are alive, so orphans kept by a dead mount can be let go.

A mount keeps an unlinked file it still has open as an orphan (Unlink/Rename keep_orphan) and frees
it with ReleaseOrphan at the last close. A mount that is killed never sends that: without this the
orphan's blocks would stay forever. Mounts heartbeat with RenewDirLeases (every third of the
timeout, which the reply tells them); a session not heard from for `timeout_s` is dead, and the
master releases its orphans (they then go through the unlink grace like any nameless file).

A mount also sends its own description (node, mountpoint, /metrics port) with every renewal: the
latest one per session is kept for `Report` (where to scrape each mount) and forgotten with the
session once it has been silent for a timeout; at most MAX_MOUNTS are kept (the oldest heard of
goes first).

Memory only. After a (re)start nobody is judged for one timeout, so live mounts get the chance to
heartbeat the new master first.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from curvine_py.core.cluster import MountInfo
from curvine_py.core.errors import InvalidArgument

MAX_MOUNTS = 10_000
MAX_NODE = 255        # bytes of a node name (a DNS name)
MAX_PATH = 4096       # bytes of a mountpoint (PATH_MAX)


@dataclass(frozen=True, slots=True)
class LiveMount:
    mount: MountInfo
    age_s: float                # since its last heartbeat


def check_mount(mount: MountInfo) -> MountInfo:
    """InvalidArgument for a description no mount sends (it would only bloat every report)."""
    if not 0 <= mount.metrics_port < 65536:
        raise InvalidArgument(f"mount metrics port {mount.metrics_port} out of range")
    if not mount.node or len(mount.node.encode()) > MAX_NODE:
        raise InvalidArgument(f"mount node name must be 1 to {MAX_NODE} bytes")
    if not mount.mountpoint.startswith("/") or len(mount.mountpoint.encode()) > MAX_PATH:
        raise InvalidArgument(f"mountpoint must be an absolute path of at most {MAX_PATH} bytes")
    return mount


class Sessions:
    def __init__(self, timeout_s: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout_s = timeout_s
        self._clock = clock
        self._started = clock()
        self._last_seen: dict[str, float] = {}
        self._mounts: dict[str, MountInfo] = {}     # sessions that described themselves
        self._lock = threading.Lock()

    def seen(self, session: str, mount: MountInfo | None = None) -> None:
        """A call from `session`; a mount's renewal brings its description (check_mount first)."""
        if not session:
            return
        with self._lock:
            now = self._clock()
            self._last_seen[session] = now
            if mount is None:
                return
            if session not in self._mounts and len(self._mounts) >= MAX_MOUNTS:
                self._forget_silent(now)
                if len(self._mounts) >= MAX_MOUNTS:
                    oldest = min(self._mounts, key=lambda s: self._last_seen.get(s, 0.0))
                    del self._mounts[oldest]
            self._mounts[session] = mount

    def mounts(self) -> list[LiveMount]:
        """The mounts heard from within the timeout, by node and path."""
        with self._lock:
            now = self._clock()
            self._forget_silent(now)
            live = [LiveMount(mount, now - self._last_seen[session]) for session, mount in self._mounts.items()]
        return sorted(live, key=lambda m: (m.mount.node, m.mount.mountpoint))

    def forget_silent(self) -> None:
        """The master's periodic sweep: a master never asked for a report still forgets sessions
        (every client that ever called would otherwise stay in memory)."""
        with self._lock:
            self._forget_silent(self._clock())

    def _forget_silent(self, now: float) -> None:
        """Drops every session silent for the timeout (under the lock): dead() says so for them
        anyway, as for a session never seen."""
        for session in [s for s, last in self._last_seen.items() if now - last >= self.timeout_s]:
            del self._last_seen[session]
            self._mounts.pop(session, None)

    def can_judge(self) -> bool:
        """False during the first timeout after start: a live session may not have called yet."""
        return self._clock() - self._started >= self.timeout_s

    def dead(self, session: str) -> bool:
        now = self._clock()
        with self._lock:
            last = self._last_seen.get(session)
            if last is not None and now - last >= self.timeout_s:
                del self._last_seen[session]      # forgotten: bounded by the live sessions
                self._mounts.pop(session, None)
                return True
            return last is None

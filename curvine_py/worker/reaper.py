"""Unlinks of freed stored files, done by a background thread instead of the request's.

Why: on the bench machine's ext4 (no journal, mounted with `discard`), freeing a file's blocks
issues a synchronous discard to the disk: unlinking a fallocated 1 MiB file took 2.7 ms of wall
for 0.2 ms of CPU, cutting a 32 MiB one to 1 MiB 9.4 ms for 2.4 ms of CPU (docs/benchmarks.md,
fourth pass). An unlink in a put (an eviction to make room) or in a delete, under the store lock,
made every other request wait on the disk too. Here the request renames the file into tmp/ (a
rename frees nothing) and this thread unlinks it.

Safety: the file leaves the namespace at once (its old name is gone before `queue` returns, so no
reader can open it by name and a restart cannot adopt it again: tmp/ is emptied at every start).
Readers that had it open keep reading it (unlink semantics). Space: the queued bytes count as free
to us (DataDir.reaping), as the kept files do; a write that the file system refuses for space
unlinks the queued files of its dir on its own thread first (`drain`). The queue is bounded
(`max_queued` files; a watermark eviction frees up to 15% of the capacity at once): when frees come faster than the disk takes the discards, the caller unlinks
itself again, so the space counted free but not yet freed stays small.
"""
from __future__ import annotations

import itertools
import logging
import os
import threading
import uuid
from collections import deque
from collections.abc import Sequence

from curvine_py.worker.datadir import TMP, DataDir

log = logging.getLogger(__name__)

GONE_SUFFIX = ".gone"
MAX_QUEUED = 1024


class Reaper:
    """Queued unlinks per data dir of `dirs` (the store's). Until `start`, nothing is queued (the
    caller unlinks itself); `start(background=False)` queues without a thread (tests: `reap` then
    unlinks on the caller's thread)."""

    def __init__(self, dirs: Sequence[DataDir], *, max_queued: int = MAX_QUEUED) -> None:
        self._data_dirs = list(dirs)
        self.max_queued = max_queued
        self._tmp = [os.path.join(d.path, TMP) for d in dirs]
        self._queue: deque[tuple[int, str, int]] = deque()
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._accepting = False
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._prefix = f"{uuid.uuid4().hex[:12]}-"
        self._serial = itertools.count()
        self.reaped = 0   # for tests and the bench

    def start(self, *, background: bool = True) -> None:
        with self._lock:
            self._accepting, self._stopped = True, False
        if background and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="reaper", daemon=True)
            self._thread.start()

    def queue(self, index: int, path: str, size: int, *, move: bool = True) -> bool:
        """Takes `path` (a file of dir `index`, `size` bytes) to unlink later; with `move`, it is
        first renamed into tmp/. False: not taken (not started, the queue full, or the rename
        failed): the caller unlinks it."""
        with self._lock:
            if not self._accepting or len(self._queue) >= self.max_queued:
                return False
        if move:
            target = f"{self._tmp[index]}/{self._prefix}{next(self._serial)}{GONE_SUFFIX}"
            try:
                os.rename(path, target)
            except OSError:
                return False
            path = target
        with self._lock:
            self._queue.append((index, path, size))
            self._data_dirs[index].reaping += size
            self._wake.notify()
        return True

    def pending(self, index: int) -> int:
        """Bytes queued in dir `index` and not unlinked yet."""
        with self._lock:
            return sum(size for i, _, size in self._queue if i == index)

    def drain(self, index: int) -> int:
        """Unlinks the queued files of dir `index` on this thread (a write needs the space now);
        returns their bytes."""
        with self._lock:
            mine = [item for item in self._queue if item[0] == index]
            if not mine:
                return 0
            self._queue = deque(item for item in self._queue if item[0] != index)
        for item in mine:
            self._unlink(item)
        return sum(size for _, _, size in mine)

    def reap(self) -> int:
        """Unlinks everything queued, on this thread; returns how many files."""
        done = 0
        while True:
            with self._lock:
                if not self._queue:
                    return done
                item = self._queue.popleft()
            self._unlink(item)
            done += 1

    def close(self) -> None:
        with self._lock:
            self._accepting = False
            self._stopped = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.reap()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._stopped:
                    self._wake.wait()
                if self._stopped:
                    return   # close() unlinks what is left
                item = self._queue.popleft()
            self._unlink(item)

    def _unlink(self, item: tuple[int, str, int]) -> None:
        index, path, size = item
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as exc:   # left in tmp/: the next start sweeps it
            log.warning("cannot unlink freed file %s: %s", path, exc)
        with self._lock:
            self._data_dirs[index].reaping -= size
            self.reaped += 1

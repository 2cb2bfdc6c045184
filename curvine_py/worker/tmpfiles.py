"""Temp files created ahead of the writes that will use them: a few per data dir, kept open by a
background thread, so that a PUT or WRITE_BLOCK does not create its file on the request path.

Why: creating a file can be the largest fixed cost of a write. On an ext4 without a journal (the
bench machine's) the inode allocator skips every inode freed in the last minute, scanning inode
tables to find them, and a worker that stores and evicts (or a benchmark that puts and deletes)
frees inodes all the time: `open(O_CREAT)` then costs more kernel CPU than fallocate, a small
pwrite and the rename together (docs/benchmarks.md, notes:core). The cost is the same in the
background thread, but it no longer sits between a client's request and its reply.

Resource handling: the pool owns the files it holds until `take` hands one over (the caller then
owns fd and path). `close` stops the thread, closes and unlinks what was never taken. A crash leaves
them in tmp/, which `Store.open` empties. The files are empty (no blocks), so they take no space
from the accounting; the writer reserves and `fallocate`s as for a file it created itself.
"""
from __future__ import annotations

import contextlib
import logging
import os
import threading
import uuid
from collections import deque
from collections.abc import Sequence

log = logging.getLogger(__name__)

DEFAULT_DEPTH = 4   # per dir: covers a burst of puts from a few clients while the thread catches up
TEMP_SUFFIX = ".tmp"


def create_temp(tmp_dir: str, mode: int) -> tuple[str, int]:
    """A new, empty, uniquely named temp file in `tmp_dir`: (path, fd open read-write)."""
    path = os.path.join(tmp_dir, f"{uuid.uuid4().hex}{TEMP_SUFFIX}")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    return path, fd


class TempFilePool:
    """Up to `depth` ready temp files per directory of `tmp_dirs` (indexes as the store's dirs)."""

    def __init__(self, tmp_dirs: Sequence[str], *, mode: int, depth: int = DEFAULT_DEPTH) -> None:
        self._dirs = list(tmp_dirs)
        self._mode = mode
        self._depth = depth
        self._ready: list[deque[tuple[str, int]]] = [deque() for _ in self._dirs]
        self._lock = threading.Lock()
        self._wanted = threading.Event()
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._failing: set[int] = set()   # dir indexes whose last create failed (thread only)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="tmpfiles", daemon=True)
        self._thread.start()

    def take(self, index: int) -> tuple[str, int] | None:
        """A ready temp file of dir `index` as (path, fd), or None when none is ready (the caller
        creates its own: a burst larger than the pool only loses the head start)."""
        with self._lock:
            ready = self._ready[index]
            taken = ready.popleft() if ready else None
        self._wanted.set()
        return taken

    def close(self) -> None:
        with self._lock:
            self._stopped = True
        self._wanted.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._lock:
            leftovers = [item for ready in self._ready for item in ready]
            for ready in self._ready:
                ready.clear()
        for path, fd in leftovers:
            os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    def ready_count(self, index: int) -> int:
        with self._lock:
            return len(self._ready[index])

    def _run(self) -> None:
        while True:
            self._wanted.clear()
            for index, tmp_dir in enumerate(self._dirs):
                while True:
                    with self._lock:
                        if self._stopped:
                            return
                        if len(self._ready[index]) >= self._depth:
                            break
                    try:
                        made = create_temp(tmp_dir, self._mode)
                    except OSError as exc:
                        # A full or failing dir: writers create their own and get the real error.
                        # Logged once per failing stretch (every take retries).
                        if index not in self._failing:
                            self._failing.add(index)
                            log.warning("cannot create temp files ahead in %s: %s", tmp_dir, exc)
                        break
                    if index in self._failing:
                        self._failing.discard(index)
                        log.info("creating temp files ahead in %s again", tmp_dir)
                    with self._lock:
                        if self._stopped:
                            keep = False
                        else:
                            self._ready[index].append(made)
                            keep = True
                    if not keep:
                        os.close(made[1])
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(made[0])
                        return
            self._wanted.wait()

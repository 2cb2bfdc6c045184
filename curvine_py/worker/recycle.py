"""Files of deleted and evicted stored files, kept in tmp/ to be overwritten by the next writes.

Why: on this machine's ext4, a 1 MiB put into a new file spends ~300 us of worker CPU creating the
file (even in the background pool, tmpfiles.py: the same two cores), ~40 us in fallocate, ~250 us
copying into freshly allocated page-cache pages and later 100-200 us unlinking it; overwriting a
file whose blocks and cached pages exist costs ~100 us in total for the copy, and moving a freed
file here is a rename (~30 us) instead of the unlink (docs/benchmarks.md, notes:datapath, puts).
A cache at capacity frees about one object per put (eviction), which is what this feeds on.

Safety (the reason the rules below exist):
- A freed file is reused only when nobody else has it open: a reader that opened it before the
  delete (an in-flight GET's descriptor, a short-circuit client's passed fd, the fuse mount's) must
  keep reading the old bytes. `take` proves it with a write lease (F_SETLEASE F_WRLCK), which the
  kernel grants only when no other open file description of the inode exists, in any process.
  Nobody can open it afterwards: its name is a fresh one in tmp/, and the name it had was gone
  before (readers that raced the delete get ENOENT: a miss). A file still open is unlinked instead.
  Where leases are refused (disabled, another file system), nothing is reused.
- A reused file is a temp file like any other (writes.py): every byte of [0, size) is rewritten
  before the rename publishes it; a write that fails is aborted and the file unlinked; a crash
  leaves it in tmp/, which the start-up scan empties. So no reader ever sees a previous object's
  bytes under a new name. Only a file of the very size, or a smaller one (grown by fallocate), is
  taken: cutting a larger one frees blocks, a synchronous discard on the request path here
  (reaper.py); it waits for a write of its size.
- What is not kept (the bounds below, no leases, a file still open at `take`) is unlinked by the
  reaper's thread (reaper.py), not by the request that freed it. A stored file replaced by a rename
  (a rewritten block) gets a second name here first (`link_aside`), so the rename frees nothing,
  and is then retired like a deleted one.
- Space: the kept files count as free space (DataDir.kept: neither the evictor nor the master sees
  them as used); at most `max_files` and `max_bytes` per dir, and a write refused by the file
  system (ENOSPC) drains its dir before it evicts anything (`drain`).

Concurrency: its own lock; `retire` runs with the store lock held (the rename happens where the
unlink did), `take` without it.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import logging
import os
import threading
import uuid
from collections.abc import Sequence

from curvine_py.worker.datadir import TMP, DataDir
from curvine_py.worker.reaper import Reaper

log = logging.getLogger(__name__)

FREED_SUFFIX = ".free"
ASIDE_SUFFIX = ".old"    # a replaced file's second name, until `retire` takes it
MAX_FILES = 256          # per dir
MAX_BYTES = 256 << 20    # per dir, and at most 1/16 of the dir's capacity (`set_capacity`)
_ATTEMPTS = 3            # files still open tried per take before creating a new one


def open_alone(path: str) -> int | None:
    """`path` opened read-write if no other open file description of it exists anywhere (a write
    lease is granted only then); None if one does. OSError when leases are refused altogether."""
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
    except OSError as exc:
        os.close(fd)
        if exc.errno == errno.EAGAIN:
            return None
        raise
    fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
    return fd


class FreedFiles:
    """Up to `max_files` / `max_bytes` freed files in the tmp/ of each of `dirs` (the store's)."""

    def __init__(self, dirs: Sequence[DataDir], *, max_files: int = MAX_FILES, max_bytes: int = MAX_BYTES,
                 reaper: Reaper | None = None) -> None:
        self._data_dirs = list(dirs)
        self._dirs = [os.path.join(d.path, TMP) for d in dirs]
        self.max_files = max_files
        self._max_bytes = [max_bytes] * len(self._dirs)
        # Per dir: size -> paths of that size, newest last (a put finds its size in one lookup).
        self._kept: list[dict[int, list[str]]] = [{} for _ in self._dirs]
        self._count = [0] * len(self._dirs)
        self._bytes = [0] * len(self._dirs)
        self.reaper = reaper
        self._lock = threading.Lock()
        # Names unique in tmp/ (emptied at every start) without a uuid per delete.
        self._prefix = f"{uuid.uuid4().hex[:12]}-"
        self._serial = itertools.count()
        self.enabled = max_files > 0
        self.reused = 0          # counters for tests and the bench
        self.still_open = 0

    def set_capacity(self, index: int, capacity: int) -> None:
        with self._lock:
            self._max_bytes[index] = min(self._max_bytes[index], capacity // 16)

    def retire(self, index: int, path: str, size: int) -> bool:
        """Takes the file at `path` (already forgotten by the inventory): kept for reuse, or, over
        the bounds or disabled, handed to the reaper; False = neither, the caller unlinks it."""
        with self._lock:
            keep = self.enabled and self._count[index] < self.max_files \
                and self._bytes[index] + size <= self._max_bytes[index]
            if keep:
                self._bytes[index] += size   # counted before the rename: a concurrent retire sees it
                self._count[index] += 1
                self._data_dirs[index].kept = self._bytes[index]
        if not keep:
            return self.reaper is not None and self.reaper.queue(index, path, size)
        kept = f"{self._dirs[index]}/{self._prefix}{next(self._serial)}{FREED_SUFFIX}"
        try:
            os.rename(path, kept)
        except OSError:
            with self._lock:
                self._bytes[index] -= size
                self._count[index] -= 1
                self._data_dirs[index].kept = self._bytes[index]
            return False
        with self._lock:
            self._kept[index].setdefault(size, []).append(kept)
        return True

    def link_aside(self, index: int, path: str) -> str | None:
        """A second name in tmp/ for the file at `path` (a stored file about to be replaced by a
        rename: with it, the rename frees no blocks); None when the link fails."""
        aside = f"{self._dirs[index]}/{self._prefix}{next(self._serial)}{ASIDE_SUFFIX}"
        try:
            os.link(path, aside)
        except OSError:
            return None
        return aside

    def _pick(self, index: int, size: int) -> tuple[str, int] | None:
        """(lock held) The newest kept file of `size`, else of the largest size below it; removed
        from the kept set. Larger files are left for writes of their size (see the docstring)."""
        by_size = self._kept[index]
        fits = size if size in by_size else max((s for s in by_size if s < size), default=None)
        if fits is None:
            return None
        paths = by_size[fits]
        path = paths.pop()
        if not paths:
            del by_size[fits]
        self._count[index] -= 1
        self._bytes[index] -= fits
        self._data_dirs[index].kept = self._bytes[index]
        return path, fits

    def take(self, index: int, size: int) -> tuple[str, int, bool] | None:
        """A freed file of dir `index` nobody else has open, of `size` bytes or fewer, as (path, fd
        read-write, whether its blocks cover `size`: else the caller fallocates); None when there
        is none."""
        for _ in range(_ATTEMPTS):
            with self._lock:
                item = self._pick(index, size)
            if item is None:
                return None
            path, old_size = item
            try:
                fd = open_alone(path)
            except OSError as exc:
                self._unlink(path)
                if exc.errno != errno.ENOENT:
                    self._disable(exc)
                return None
            if fd is None:   # a reader still has it: it keeps its bytes, we let it go
                self.still_open += 1
                if self.reaper is None or not self.reaper.queue(index, path, old_size, move=False):
                    self._unlink(path)
                continue
            self.reused += 1
            return path, fd, old_size == size
        return None

    def drain(self, index: int) -> int:
        """Unlinks every kept file of dir `index` and those queued for the reaper (a write needs
        the space), on this thread; returns their bytes."""
        with self._lock:
            items = [(path, size) for size, paths in self._kept[index].items() for path in paths]
            self._kept[index].clear()
            self._count[index] -= len(items)
        for path, _ in items:
            self._unlink(path)
        with self._lock:   # free on the disk only now
            self._bytes[index] -= sum(size for _, size in items)
            self._data_dirs[index].kept = self._bytes[index]
        reaped = self.reaper.drain(index) if self.reaper is not None else 0
        return sum(size for _, size in items) + reaped

    def kept_bytes(self, index: int) -> int:
        with self._lock:
            return self._bytes[index]

    def close(self) -> None:
        for index in range(len(self._dirs)):
            self.drain(index)

    def _disable(self, exc: OSError) -> None:
        with self._lock:
            was = self.enabled
            self.enabled = False
        if was:
            log.warning("freed files are not reused (no write lease on this file system: %s)", exc)
        for index in range(len(self._dirs)):
            self.drain(index)

    @staticmethod
    def _unlink(path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

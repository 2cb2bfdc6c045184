"""One data dir of a worker: its on-disk layout, its lock, and its space accounting.

Layout (paths derive only from hashes and ids, never from user strings)::

    DIR/blocks/<shard>/<block_file_name(id)>     file blocks
    DIR/kv/<shard>/<object_file_name(key)>       KV objects
    DIR/tmp/                                     writes in progress (emptied at start)
    DIR/worker.lock                              flock: one worker per dir
    DIR/worker.id                                (first dir only) the persistent worker id

Space: a data dir may hold at most its configured capacity (0 = the file system's size), and
always leaves `free_space_ratio` of its file system free (the free-space reserve, as JuiceFS's
--free-space-ratio), measured from the file system itself (statvfs) because others write there
too: a cache must leave its host room to live (issue 11: a worker once filled its host's root disk).
Below the reserve, the evictor sees the dir as over its capacity and evicts cache data; a write
that would eat into it gets NoSpace (ENOSPC), durable ones included.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import uuid
from dataclasses import dataclass

from curvine_py.core.errors import CurvineError, InvalidArgument

log = logging.getLogger(__name__)

BLOCKS = "blocks"
OBJECTS = "kv"
TMP = "tmp"
LOCK_FILE = "worker.lock"
WORKER_ID_FILE = "worker.id"
FILE_MODE = 0o600
DEFAULT_FREE_SPACE_RATIO = 0.10


@dataclass(frozen=True, slots=True)
class Usage:
    capacity: int
    used: int
    available: int


class DataDir:
    """One data dir and its space accounting (`used` = our files, `reserved` = writes in flight)."""

    def __init__(self, path: str, capacity_limit: int, free_space_ratio: float = DEFAULT_FREE_SPACE_RATIO) -> None:
        if capacity_limit < 0:
            raise InvalidArgument(f"negative capacity for data dir {path}")
        if not 0 <= free_space_ratio < 1:
            raise InvalidArgument(f"free space ratio must be in [0, 1), got {free_space_ratio}")
        self.path = os.path.abspath(path)
        self.limit = capacity_limit   # 0 = the filesystem's size
        self.free_space_ratio = free_space_ratio
        self.used = 0
        self.reserved = 0
        self.kept = 0       # freed files kept in tmp/ for reuse (recycle.py): free space to us
        self.reaping = 0    # freed files queued for a background unlink (reaper.py): free to us too
        self._lock_fd = -1

    def disk(self) -> tuple[int, int]:
        """(filesystem size, free bytes for us)."""
        # statvfs itself, as psutil.disk_usage computes them (its wrapper is half a dozen calls, once
        # per write): total = blocks, free = what an unprivileged user may still take.
        # The freed bytes are read before the statvfs: the reaper and the recycler unlink first and
        # uncount after, so this order can only count a file twice (free and still freeing), never
        # miss one that the statvfs saw allocated and the counters no longer hold (a write told
        # ENOSPC with the room there: CI, test_full_disk_gives_enospc_and_nothing_half_written).
        freeing = self.kept + self.reaping
        st = os.statvfs(self.path)
        return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize + freeing

    def space(self) -> tuple[int, int, int]:
        """(effective capacity, bytes free above the reserve, the reserve) from one statvfs."""
        total, free = self.disk()
        keep = int(total * self.free_space_ratio)
        capacity = min(self.limit, total) if self.limit else total
        return min(capacity, total - keep), max(0, free - keep), keep

    def capacity(self) -> int:
        return self.space()[0]

    def room(self) -> int:
        """Bytes a new object may take now: within the capacity, and leaving the reserve free."""
        capacity, spare, _ = self.space()
        return max(0, min(capacity - self.used - self.reserved, spare))

    def pressure(self) -> tuple[int, int]:
        """(used incl. reservations, effective capacity) for the eviction policy: a disk shared with
        other data counts as smaller than it is, so we evict before the disk eats into the reserve."""
        total, free = self.disk()
        keep = int(total * self.free_space_ratio)
        capacity = min(self.limit, total) if self.limit else total
        busy = self.used + self.reserved
        # Not clamped at the reserve: free space below it shrinks the capacity below what we hold,
        # so the evictor frees the deficit too.
        return busy, max(0, min(capacity, total - keep, busy + free - keep))

    def usage(self) -> tuple[int, int]:
        """(capacity, available) as reported to the master."""
        capacity, spare, _ = self.space()
        return capacity, max(0, min(capacity - self.used - self.reserved, spare))

    def lock(self) -> None:
        fd = os.open(os.path.join(self.path, LOCK_FILE), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise CurvineError(f"data dir {self.path} is in use by another worker",
                               errno=errno.EBUSY) from None
        self._lock_fd = fd

    def unlock(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)   # closing drops the flock
            self._lock_fd = -1


def load_worker_id(data_dir: str) -> str:
    """The worker id persisted in `data_dir`, generated once."""
    path = os.path.join(data_dir, WORKER_ID_FILE)
    with contextlib.suppress(FileNotFoundError):
        with open(path, encoding="ascii", errors="replace") as fh:
            text = fh.read().strip()
        if text and text.isalnum() and len(text) <= 64:
            return text
        log.warning("ignoring malformed %s", path)
    worker_id = uuid.uuid4().hex[:16]
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="ascii") as fh:
        fh.write(worker_id + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.rename(tmp, path)
    return worker_id

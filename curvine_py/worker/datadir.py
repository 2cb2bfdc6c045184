"""One data dir of a worker: its on-disk layout, its lock, and its space accounting.

Layout (paths derive only from hashes and ids, never from user strings)::

    DIR/blocks/<shard>/<block_file_name(id)>     file blocks
    DIR/kv/<shard>/<object_file_name(key)>       KV objects
    DIR/tmp/                                     writes in progress (emptied at start)
    DIR/worker.lock                              flock: one worker per dir
    DIR/worker.id                                (first dir only) the persistent worker id
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import uuid
from dataclasses import dataclass

import psutil

from curvine_py.core.errors import CurvineError, InvalidArgument

log = logging.getLogger(__name__)

BLOCKS = "blocks"
OBJECTS = "kv"
TMP = "tmp"
LOCK_FILE = "worker.lock"
WORKER_ID_FILE = "worker.id"
FILE_MODE = 0o600


@dataclass(frozen=True, slots=True)
class Usage:
    capacity: int
    used: int
    available: int


class DataDir:
    """One data dir and its space accounting (`used` = our files, `reserved` = writes in flight)."""

    def __init__(self, path: str, capacity_limit: int) -> None:
        if capacity_limit < 0:
            raise InvalidArgument(f"negative capacity for data dir {path}")
        self.path = os.path.abspath(path)
        self.limit = capacity_limit   # 0 = the filesystem's size
        self.used = 0
        self.reserved = 0
        self._lock_fd = -1

    def disk(self) -> tuple[int, int]:
        """(filesystem size, free bytes for us)."""
        usage = psutil.disk_usage(self.path)
        return int(usage.total), int(usage.free)

    def capacity(self) -> int:
        total, _ = self.disk()
        return min(self.limit, total) if self.limit else total

    def room(self) -> int:
        """Bytes a new object may take now: within the configured capacity and the disk's free space."""
        total, free = self.disk()
        capacity = min(self.limit, total) if self.limit else total
        return max(0, min(capacity - self.used - self.reserved, free))

    def pressure(self) -> tuple[int, int]:
        """(used incl. reservations, effective capacity) for the eviction policy: a disk shared with
        other data counts as smaller than it is, so we evict before the disk fills up."""
        total, free = self.disk()
        capacity = min(self.limit, total) if self.limit else total
        busy = self.used + self.reserved
        return busy, min(capacity, busy + free)

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

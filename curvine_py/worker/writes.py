"""The write pipeline of the store: space reservation, temp files, receiving and digesting the
payload, and the atomic publication of the stored file.

Measured (see the worker report): space is reserved in the accounting and with `posix_fallocate`
on a temp file first (ENOSPC -> evict cache data -> `NoSpace`), then the payload is received one
1 MiB chunk at a time into a reused page-aligned buffer, digested while hot in cache and
`pwrite`n; the header goes last, then `rename` publishes the file. Receiving straight into an mmap
of the file was ~1.7x slower here (page faults on the shared mapping dominate). Readers therefore
never see a partial object, and a failed write leaves nothing visible. The temp files themselves
are, first, freed files of deleted objects nobody has open any more (recycle.py: overwriting a file
whose blocks and cached pages exist costs a third of filling a new one, and no file is created or
unlinked), else created ahead by a background thread once a pool is attached (tmpfiles.py: file
creation is the largest fixed cost of a small write on ext4 here), else created on the spot.

Concurrency: reservation and publication take the store lock (renames that change what a name
points to happen under it, so a concurrent re-put and an eviction cannot unlink each other's file);
the bulk I/O of `PendingWrite.receive` happens outside it.
"""
from __future__ import annotations

import contextlib
import errno
import mmap
import os
import threading
from collections.abc import Callable, Sequence
from typing import Protocol, Self

from curvine_py.core import layout
from curvine_py.core.errors import Corrupt, CurvineError, InvalidArgument, NoSpace
from curvine_py.proto.curvine.v1.common_pb2 import CACHE, DURABLE
from curvine_py.worker.datadir import FILE_MODE, TMP, DataDir
from curvine_py.worker.inventory import Clock, Entry, Inventory
from curvine_py.worker.recycle import FreedFiles
from curvine_py.worker.tmpfiles import TempFilePool, create_temp

CHUNK = layout.CHUNK_SIZE

# Called with the store lock held: (dir index, bytes needed) -> entries evicted.
Reclaimer = Callable[[int, int], int]

_local = threading.local()


def _scratch() -> memoryview:
    """A per-thread 1 MiB page-aligned receive buffer (kernel->user copies into unaligned memory
    are several times slower on this CPU class)."""
    buffer: memoryview | None = getattr(_local, "buffer", None)
    if buffer is None:
        buffer = _local.buffer = memoryview(mmap.mmap(-1, CHUNK))
    return buffer


def _pwrite_all(fd: int, data: bytes | memoryview, offset: int) -> None:
    view = memoryview(data)
    while len(view):
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


def fsync_directory(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def copier(data: bytes | bytearray | memoryview) -> Callable[[memoryview], None]:
    """A `fill` for `PendingWrite.receive` from a buffer in memory."""
    source = memoryview(data).cast("B")
    position = 0

    def fill(view: memoryview) -> None:
        nonlocal position
        view[:] = source[position:position + len(view)]
        position += len(view)

    return fill


class WriteTarget(Protocol):
    """Where a finished or abandoned write goes (the pipeline below)."""

    def publish(self, entry: Entry, tmp_path: str, final_path: str) -> bool: ...
    def release(self, entry: Entry) -> None: ...


class PendingWrite:
    """A write in progress: reserved space, a temp file. `receive` then `commit`, or `abort`.
    Used as a context manager, anything but a commit aborts (temp removed, space released)."""

    def __init__(self, target: WriteTarget, entry: Entry, header: layout.StoredHeader, tmp_path: str,
                 final_path: str, fd: int, expected_checksum: int) -> None:
        self._target = target
        self._entry = entry
        self._header = header
        self._tmp_path = tmp_path
        self._final_path = final_path
        self._fd = fd
        self._expected = expected_checksum
        self._received = False
        self._done = False

    @property
    def length(self) -> int:
        return self._header.length

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._done:
            self.abort()

    def receive(self, fill: Callable[[memoryview], None],
                expected_digests: Callable[[], Sequence[int]] | None = None) -> None:
        """Takes the payload from `fill(view)`, which must fill `view` completely (it is called
        with consecutive pieces of at most 1 MiB). Corrupt (EIO) if the bytes do not match the
        client's checksum (0 = the client sent none) or, when `expected_digests` is given, the chunk
        digests it returns once the payload is in (the client's digest trailer); either way this
        happens before the header is written, so a mismatch leaves only the temp file to abort."""
        if self._received or self._done:
            raise InvalidArgument("payload already received")
        scratch = _scratch()
        header_size = self._header.header_size
        length = self._header.length
        digests: list[int] = []
        position = 0
        while position < length:
            view = scratch[:min(CHUNK, length - position)]
            fill(view)
            digests.append(layout.checksum(view))
            if length <= CHUNK:
                break  # small object: header and payload go out in one pwritev below
            _pwrite_all(self._fd, view, header_size + position)
            position += len(view)
        if expected_digests is not None:
            expected = list(expected_digests())
            if expected != digests:
                bad = next((i for i, (a, b) in enumerate(zip(expected, digests, strict=False)) if a != b),
                           min(len(expected), len(digests)))
                raise Corrupt(f"payload chunk {bad} does not match the client's digest")
        total = layout.combine(digests)
        if self._expected and self._expected != total:
            raise Corrupt(f"payload checksum {total:016x} does not match the client's {self._expected:016x}")
        header = layout.StoredHeader(self._header.kind, self._header.storage_class, length, total,
                                     self._header.created_ms, self._header.ttl_ms, self._header.block_id,
                                     self._header.key, self._header.user_meta, tuple(digests))
        encoded = header.encode()
        if 0 < length <= CHUNK:
            written = os.pwritev(self._fd, [encoded, scratch[:length]], 0)
            if written != len(encoded) + length:   # a regular file on a fallocated range: never short
                raise CurvineError(f"short write of {written} bytes to {self._tmp_path}")
        else:
            _pwrite_all(self._fd, encoded, 0)
        self._header = header
        self._received = True

    def commit(self) -> bool:
        """Publishes the file. False: a KV object with this key was stored meanwhile (the stored
        one is kept: write-once, a re-put is idempotent). Durable-class files are fsynced with their
        directories first (cache-class ones are not: losing them to a power cut is a miss)."""
        if not self._received:
            raise InvalidArgument("commit before the payload was received")
        durable = self._header.storage_class == DURABLE
        if durable:     # on stable storage before anyone is told it is stored (as NFS's COMMIT)
            os.fsync(self._fd)
        os.close(self._fd)
        self._fd = -1
        self._done = True
        published = self._target.publish(self._entry, self._tmp_path, self._final_path)
        if published and durable:   # the rename too: both directories it touched
            fsync_directory(os.path.dirname(self._final_path))
            fsync_directory(os.path.dirname(self._tmp_path))
        return published

    def abort(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if not self._done:
            self._done = True
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._tmp_path)
            self._target.release(self._entry)


class WritePipeline:
    """Starts writes (validation, reservation, temp file, fallocate) and publishes finished ones."""

    def __init__(self, dirs: Sequence[DataDir], inventory: Inventory, lock: threading.RLock,
                 clock: Clock) -> None:
        self._dirs = dirs
        self._inventory = inventory
        self._lock = lock
        self._clock = clock
        self.reclaim: Reclaimer | None = None
        self.temp_pool: TempFilePool | None = None
        self.freed: FreedFiles | None = None
        self.known_shards: set[str] = set()   # shard directories that exist (no makedirs per write)

    def begin(self, name: str, kind: int, length: int, checksum: int, storage_class: int, ttl_ms: int,
              *, key: str = "", block_id: int = 0, user_meta: bytes = b"") -> PendingWrite:
        if length < 0:
            raise InvalidArgument("negative length")
        if storage_class not in (CACHE, DURABLE):
            raise InvalidArgument(f"unknown storage class {storage_class}")
        if len(user_meta) > layout.MAX_USER_META:
            raise InvalidArgument(f"user metadata of {len(user_meta)} bytes exceeds {layout.MAX_USER_META}")
        if ttl_ms < 0:
            raise InvalidArgument("negative ttl")
        now = self._clock()
        header = layout.StoredHeader(kind, storage_class, length, 0, now, ttl_ms, block_id, key, user_meta,
                                     (0,) * layout.chunk_count(length))
        size = header.header_size + length
        index = self._reserve(size)
        entry = Entry(name, index, kind, size, length, storage_class, now + ttl_ms if ttl_ms else 0, now,
                      block_id)
        allocated = False
        try:
            reused = self.freed.take(index, size) if self.freed is not None else None
            if reused is not None:
                tmp_path, fd, allocated = reused
            else:
                taken = self.temp_pool.take(index) if self.temp_pool is not None else None
                if taken is None:
                    taken = create_temp(os.path.join(self._dirs[index].path, TMP), FILE_MODE)
                tmp_path, fd = taken
        except OSError:
            self.release(entry)
            raise
        try:
            if not allocated:
                self._fallocate(fd, index, size)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp_path)
            self.release(entry)
            raise
        return PendingWrite(self, entry, header, tmp_path, self._inventory.path_of(entry), fd, checksum)

    def _reserve(self, size: int) -> int:
        """Picks the dir with the most room, evicting cache data if none has enough."""
        with self._lock:
            # One statvfs per dir per write: it is a good share of a small write's cost.
            rooms = [d.room() for d in self._dirs]
            for index in sorted(range(len(self._dirs)), key=rooms.__getitem__, reverse=True):
                data_dir = self._dirs[index]
                room = rooms[index]
                if room < size and self.reclaim is not None and self.reclaim(index, size):
                    room = data_dir.room()
                if room >= size:
                    data_dir.reserved += size
                    return index
        raise NoSpace(f"no data dir has room for {size} bytes")

    def _fallocate(self, fd: int, index: int, size: int) -> None:
        if size == 0:
            return
        drained = reclaimed = False
        while True:
            try:
                os.posix_fallocate(fd, 0, size)
                return
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                if not drained and self.freed is not None and self.freed.drain(index):
                    drained = True   # the kept freed files go first
                    continue
                if reclaimed or self.reclaim is None:
                    break
                # The disk is fuller than our accounting says (a shared fs): evict, retry once.
                # This write is already counted in `reserved`, so it asks for nothing extra.
                reclaimed = True
                with self._lock:
                    self.reclaim(index, 0)
        raise NoSpace(f"data dir {self._dirs[index].path} is full")

    def _free(self, index: int, path: str, size: int) -> None:
        """A file nobody will look up again: kept for reuse or reaped (recycle.py), else unlinked."""
        if self.freed is None or not self.freed.retire(index, path, size):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    def release(self, entry: Entry) -> None:
        """Gives back the reservation of an abandoned write."""
        with self._lock:
            self._dirs[entry.dir_index].reserved -= entry.size

    def publish(self, entry: Entry, tmp_path: str, final_path: str) -> bool:
        """Renames the temp file into place (lock held, so a concurrent re-put or eviction of the
        same name cannot interleave). Whatever happens, the reservation is released and no temp
        file is left behind."""
        inventory = self._inventory
        with self._lock:
            self._dirs[entry.dir_index].reserved -= entry.size
            aside = None
            try:
                existing = inventory.get(entry.name)
                if existing is not None and entry.kind == layout.KIND_OBJECT \
                        and not existing.expired(self._clock()):
                    os.unlink(tmp_path)
                    return False
                shard = os.path.dirname(final_path)
                if shard not in self.known_shards:
                    os.makedirs(shard, exist_ok=True)
                    self.known_shards.add(shard)
                if existing is not None and existing.dir_index == entry.dir_index and self.freed is not None:
                    # A second name for the file being replaced (a rewritten block): the rename
                    # below then frees no blocks under the lock; the old file is kept or reaped.
                    aside = self.freed.link_aside(entry.dir_index, final_path)
                os.rename(tmp_path, final_path)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp_path)
                if aside is not None:   # the old file still has its own name: this frees nothing
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(aside)
                raise
            if existing is not None:
                inventory.forget(existing)
                old = aside if existing.dir_index == entry.dir_index else inventory.path_of(existing)
                if old is not None:
                    self._free(existing.dir_index, old, existing.size)
            entry.last_access_ms = self._clock()
            inventory.remember(entry)
        return True

"""The worker's local store: blocks and KV objects as files under one or more data dirs, and the
in-memory inventory of them.

Layout of each data dir (paths derive only from hashes and ids, never from user strings)::

    DIR/blocks/<shard>/<block_file_name(id)>     file blocks
    DIR/kv/<shard>/<object_file_name(key)>       KV objects
    DIR/tmp/                                     writes in progress (emptied at start)
    DIR/worker.lock                              flock: one worker per dir
    DIR/worker.id                                (first dir only) the persistent worker id

Every stored file is a `StoredHeader` (core/layout.py) followed by the payload at `header_size`.

Write path (measured, see the worker report): space is reserved in the accounting and with
`posix_fallocate` on a temp file first (ENOSPC -> evict cache data -> `NoSpace`), then the payload
is received one 1 MiB chunk at a time into a reused page-aligned buffer, digested while hot in
cache and `pwrite`n; the header goes last, then `rename` publishes the file. Receiving straight
into an mmap of the file was ~1.7x slower here (page faults on the shared mapping dominate).
Readers therefore never see a partial object, and a failed write leaves nothing visible. The temp
files themselves are created ahead by a background thread once `start_temp_pool` runs (tmpfiles.py:
file creation is the largest fixed cost of a small write on ext4 here).

Read path: `open_object`/`open_block` hand out an fd and the parsed header. The last OPEN_FILES
files read stay open with their headers, keyed by inventory name and tied to the inventory entry
they were opened for: a hit costs a `dup` instead of open + header read + parse, a fixed cost that
dominates small gets (bench kv; docs/benchmarks.md). Whatever removes or replaces an entry
(`_forget`) closes its cached fd, so a deleted, evicted or replaced file is never served from it.

Concurrency: one re-entrant lock guards the inventory and the space accounting; renames and
unlinks that change what a name points to happen under it, so a concurrent re-put and an eviction
cannot unlink each other's file. Bulk I/O happens outside it. A reader holds an open fd, never the
lock: unlinking a file that an fd reads from is safe on Linux, so eviction never breaks a reader.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import heapq
import logging
import mmap
import os
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Self

import psutil

from curvine_py.core import layout
from curvine_py.core.errors import Corrupt, CurvineError, InvalidArgument, NoSpace, ProtocolError
from curvine_py.core.eviction import Candidate
from curvine_py.core.keys import DEFAULT_MAX_KEY_BYTES, validate_key
from curvine_py.proto.curvine.v1.common_pb2 import CACHE, DURABLE, STORAGE_CLASS_UNSPECIFIED
from curvine_py.worker import tmpfiles
from curvine_py.worker.tmpfiles import TempFilePool, create_temp

log = logging.getLogger(__name__)

BLOCKS = "blocks"
OBJECTS = "kv"
TMP = "tmp"
LOCK_FILE = "worker.lock"
WORKER_ID_FILE = "worker.id"
FILE_MODE = 0o600
CHUNK = layout.CHUNK_SIZE
# Stored files kept open (with their parsed header) after a read, most recently read first: a hot
# object (a shared prompt prefix) is then served without open + header read + parse each time.
OPEN_FILES = 64

Clock = Callable[[], int]
# Called with the store lock held: (dir index, bytes needed) -> entries evicted.
Reclaimer = Callable[[int, int], int]


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class Entry:
    """One stored file in the inventory (mutable: access time and pins change)."""
    name: str               # inventory key: "kv/<hash>" or "blocks/<id hex>"
    dir_index: int
    kind: int               # layout.KIND_BLOCK / KIND_OBJECT
    size: int               # bytes on disk: header + payload
    length: int             # payload bytes
    storage_class: int
    expires_at_ms: int      # 0 = no TTL
    last_access_ms: int
    block_id: int = 0
    pinned_until_ms: int = 0

    def expired(self, now_ms: int) -> bool:
        return self.expires_at_ms != 0 and self.expires_at_ms <= now_ms


@dataclass(frozen=True, slots=True)
class Usage:
    capacity: int
    used: int
    available: int


@dataclass(frozen=True, slots=True)
class Stats:
    blocks: int
    objects: int
    evictions: int
    used: int


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


def read_header(fd: int) -> layout.StoredHeader:
    """Parses the header of an open stored file (ProtocolError if it is not one)."""
    head = os.pread(fd, layout.PAGE, 0)
    size = layout.StoredHeader.peek_size(head)
    if size > len(head):
        head = os.pread(fd, size, 0)
    return layout.StoredHeader.decode(head)


class StoredFile:
    """An open stored file. The fd keeps reading the same bytes even if the file is evicted,
    deleted or replaced meanwhile. Close it (it is a context manager)."""

    def __init__(self, fd: int, header: layout.StoredHeader) -> None:
        self.fd = fd
        self.header = header

    @property
    def data_offset(self) -> int:
        return self.header.header_size

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read(self, offset: int = 0, length: int | None = None) -> bytes:
        """Payload bytes [offset, offset+length) (for tests and small control paths; the data
        plane uses sendfile or passes the fd)."""
        end = self.header.length if length is None else min(self.header.length, offset + length)
        out = bytearray()
        while offset + len(out) < end:
            piece = os.pread(self.fd, end - offset - len(out), self.data_offset + offset + len(out))
            if not piece:
                raise Corrupt("stored file is shorter than its header says")
            out += piece
        return bytes(out)

    def _verified(self, start: int, end: int) -> bytes:
        """Bytes [start, end) of the payload, after checking every stored chunk they touch."""
        first, last = start // CHUNK, (end - 1) // CHUNK
        base = first * CHUNK
        raw = self.read(base, min((last + 1) * CHUNK, self.header.length) - base)
        for index in range(first, last + 1):
            piece = raw[(index - first) * CHUNK:(index - first + 1) * CHUNK]
            if layout.checksum(piece) != self.header.chunk_checksums[index]:
                raise Corrupt(f"stored chunk {index} fails its checksum")
        return raw[start - base:end - base]

    def range_digests(self, offset: int, length: int) -> list[int]:
        """Digests of the reply payload [offset, offset+length) cut in 1 MiB pieces from its start,
        which is what a reader recomputes. A piece that is a whole stored chunk (offset chunk-aligned,
        the usual case) reuses the stored digest; an edge piece is read, its stored chunk verified
        (Corrupt if bad: bad bytes are never vouched for) and the piece digested."""
        digests: list[int] = []
        position, end = offset, offset + length
        while position < end:
            piece_end = min(position + CHUNK, end)
            aligned = position % CHUNK == 0
            if aligned and (piece_end - position == CHUNK or piece_end == self.header.length):
                digests.append(self.header.chunk_checksums[position // CHUNK])
            else:
                digests.append(layout.checksum(self._verified(position, piece_end)))
            position = piece_end
        return digests

    def verify(self) -> bool:
        """Recomputes every chunk digest of the payload (used before dropping a reported copy)."""
        position = 0
        try:
            for expected in self.header.chunk_checksums:
                if layout.checksum(self.read(position, CHUNK)) != expected:
                    return False
                position += CHUNK
        except (OSError, Corrupt):
            return False
        return layout.combine(list(self.header.chunk_checksums)) == self.header.checksum


def _fsync_directory(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class PendingWrite:
    """A write in progress: reserved space, a temp file. `receive` then `commit`, or `abort`.
    Used as a context manager, anything but a commit aborts (temp removed, space released)."""

    def __init__(self, store: Store, entry: Entry, header: layout.StoredHeader, tmp_path: str,
                 final_path: str, fd: int, expected_checksum: int) -> None:
        self._store = store
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
        published = self._store._publish(self._entry, self._tmp_path, self._final_path)
        if published and durable:   # the rename too: both directories it touched
            _fsync_directory(os.path.dirname(self._final_path))
            _fsync_directory(os.path.dirname(self._tmp_path))
        return published

    def abort(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if not self._done:
            self._done = True
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._tmp_path)
            self._store._release(self._entry)


class Store:
    """Blocks and KV objects on local data dirs. `open()` before use, `close()` after.

    Error handling: invalid keys/arguments raise InvalidArgument/NameTooLong, lack of space
    NoSpace, bytes that fail a checksum Corrupt; a miss is None/False, never an error.
    """

    def __init__(self, data_dirs: Sequence[tuple[str, int]], *, max_key_bytes: int = DEFAULT_MAX_KEY_BYTES,
                 pin_grace_ms: int = 30_000, clock: Clock = wall_ms, open_files: int = OPEN_FILES) -> None:
        if not data_dirs:
            raise InvalidArgument("a worker needs at least one --data-dir")
        self.dirs = [DataDir(path, capacity) for path, capacity in data_dirs]
        if len({d.path for d in self.dirs}) != len(self.dirs):
            raise InvalidArgument("the same data dir is listed twice")
        self.max_key_bytes = max_key_bytes
        self.pin_grace_ms = pin_grace_ms
        self.clock = clock
        self.lock = threading.RLock()
        self._inventory: dict[str, Entry] = {}
        self._blocks = 0
        self._objects = 0
        self.evictions = 0
        self._evicted_block_ids: list[int] = []
        self._bad_block_ids: list[int] = []
        self._reclaim: Reclaimer | None = None
        self._made_shards: set[str] = set()
        self._temp_pool: TempFilePool | None = None
        # Hot stored files kept open for reads (see _open): name -> (entry, fd, header), LRU order.
        self._open_files: OrderedDict[str, tuple[Entry, int, layout.StoredHeader]] = OrderedDict()
        self.open_files_limit = open_files
        # (expires_at_ms, name) of entries with a TTL, so the periodic pass finds expired entries
        # without scanning the inventory; stale items (entry gone or replaced) are skipped lazily.
        self._expiries: list[tuple[int, str]] = []

    # -- lifecycle -------------------------------------------------------------------------------

    def open(self) -> None:
        """Locks the dirs, empties tmp/ and rebuilds the inventory from the stored headers
        (a corrupt or truncated file is removed and logged)."""
        locked: list[DataDir] = []
        try:
            for data_dir in self.dirs:
                for sub in (BLOCKS, OBJECTS, TMP):
                    os.makedirs(os.path.join(data_dir.path, sub), exist_ok=True)
                data_dir.lock()
                locked.append(data_dir)
        except BaseException:
            for data_dir in locked:
                data_dir.unlock()
            raise
        for index, data_dir in enumerate(self.dirs):
            tmp = os.path.join(data_dir.path, TMP)
            for leftover in os.scandir(tmp):
                with contextlib.suppress(OSError):
                    os.unlink(leftover.path)
            self._scan(index, BLOCKS, layout.KIND_BLOCK)
            self._scan(index, OBJECTS, layout.KIND_OBJECT)
        log.info("store opened: %d blocks, %d objects, %d bytes in %d dir(s)",
                 self._blocks, self._objects, sum(d.used for d in self.dirs), len(self.dirs))

    def close(self) -> None:
        if self._temp_pool is not None:
            self._temp_pool.close()
            self._temp_pool = None
        with self.lock:
            for _, fd, _ in self._open_files.values():
                os.close(fd)
            self._open_files.clear()
        for data_dir in self.dirs:
            data_dir.unlock()

    def start_temp_pool(self, depth: int = tmpfiles.DEFAULT_DEPTH) -> None:
        """Writes take temp files created ahead by a background thread (tmpfiles.py) instead of
        creating their own on the request path. Call after `open`; `close` stops it."""
        if self._temp_pool is None and depth > 0:
            self._temp_pool = TempFilePool([os.path.join(d.path, TMP) for d in self.dirs], mode=FILE_MODE,
                                           depth=depth)
            self._temp_pool.start()

    def __enter__(self) -> Self:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def load_worker_id(self) -> str:
        """The worker id persisted in the first data dir, generated once."""
        path = os.path.join(self.dirs[0].path, WORKER_ID_FILE)
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

    def attach_reclaimer(self, reclaim: Reclaimer) -> None:
        """The evictor's on-demand hook, called (lock held) when a write lacks room."""
        self._reclaim = reclaim

    def _scan(self, index: int, sub: str, kind: int) -> None:
        root = os.path.join(self.dirs[index].path, sub)
        now = self.clock()
        for shard in os.scandir(root):
            if not shard.is_dir(follow_symlinks=False):
                self._discard(shard.path, "not a shard directory")
                continue
            for item in os.scandir(shard.path):
                try:
                    entry = self._entry_from_disk(index, sub, kind, shard.name, item, now)
                except (OSError, ProtocolError, CurvineError, UnicodeDecodeError, ValueError) as exc:
                    self._discard(item.path, str(exc))
                    continue
                self._adopt(entry, item.path)

    def _entry_from_disk(self, index: int, sub: str, kind: int, shard: str, item: os.DirEntry[str],
                         now: int) -> Entry:
        if not item.is_file(follow_symlinks=False):
            raise ProtocolError("not a regular file")
        fd = os.open(item.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            header = read_header(fd)
            size = os.fstat(fd).st_size
        finally:
            os.close(fd)
        if header.kind != kind:
            raise ProtocolError(f"kind {header.kind} in the {sub} tree")
        expected = (layout.block_file_name(header.block_id) if kind == layout.KIND_BLOCK
                    else layout.object_file_name(header.key))
        if item.name != expected or layout.shard_dir(expected) != shard:
            raise ProtocolError(f"file name does not match its header ({expected})")
        if size != header.header_size + header.length:
            raise ProtocolError(f"size {size} != header {header.header_size} + payload {header.length}")
        expires = header.created_ms + header.ttl_ms if header.ttl_ms else 0
        return Entry(f"{sub}/{item.name}", index, kind, size, header.length, header.storage_class, expires,
                     max(header.created_ms, min(now, int(item.stat().st_atime * 1000))), header.block_id)

    def _adopt(self, entry: Entry, path: str) -> None:
        previous = self._inventory.get(entry.name)
        if previous is not None:
            # The same name in two dirs (a crash between publishing and unlinking the old copy):
            # keep the most recent copy.
            loser = entry if previous.last_access_ms >= entry.last_access_ms else previous
            self._discard(self._path_of(loser), "duplicate of a newer copy")
            if loser is entry:
                return
            self._forget(previous)
        self._remember(entry)
        self._made_shards.add(os.path.dirname(path))

    def _discard(self, path: str, why: str) -> None:
        log.warning("removing %s: %s", path, why)
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            os.unlink(path)

    # -- inventory bookkeeping (lock held) --------------------------------------------------------

    def _remember(self, entry: Entry) -> None:
        self._inventory[entry.name] = entry
        if entry.expires_at_ms:
            heapq.heappush(self._expiries, (entry.expires_at_ms, entry.name))
        self.dirs[entry.dir_index].used += entry.size
        if entry.kind == layout.KIND_BLOCK:
            self._blocks += 1
        else:
            self._objects += 1

    def _forget(self, entry: Entry) -> None:
        del self._inventory[entry.name]
        cached = self._open_files.pop(entry.name, None)
        if cached is not None:
            os.close(cached[1])
        self.dirs[entry.dir_index].used -= entry.size
        if entry.kind == layout.KIND_BLOCK:
            self._blocks -= 1
        else:
            self._objects -= 1

    def _path_of(self, entry: Entry) -> str:
        sub, _, file_name = entry.name.partition("/")
        return os.path.join(self.dirs[entry.dir_index].path, sub, layout.shard_dir(file_name), file_name)

    def _remove_locked(self, entry: Entry) -> None:
        self._forget(entry)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path_of(entry))

    # -- names -------------------------------------------------------------------------------------

    def _object_name(self, key: str) -> str:
        validate_key(key, self.max_key_bytes)
        return f"{OBJECTS}/{layout.object_file_name(key)}"

    @staticmethod
    def _block_name(block_id: int) -> str:
        if not 0 <= block_id < 2**64:
            raise InvalidArgument(f"block id {block_id} out of range")
        return f"{BLOCKS}/{layout.block_file_name(block_id)}"

    # -- writes ------------------------------------------------------------------------------------

    def begin_put(self, key: str, length: int, *, checksum: int = 0, user_meta: bytes = b"",
                  storage_class: int = STORAGE_CLASS_UNSPECIFIED, ttl_ms: int = 0) -> PendingWrite | None:
        """Starts storing a KV object; None when the key is already stored (write-once: the caller
        drops the payload and reports success). Class unspecified = cache (the LMCache L2 tier)."""
        name = self._object_name(key)
        with self.lock:
            existing = self._inventory.get(name)
            if existing is not None and not existing.expired(self.clock()):
                return None
        cls = CACHE if storage_class == STORAGE_CLASS_UNSPECIFIED else storage_class
        return self._begin(name, layout.KIND_OBJECT, length, checksum, cls, ttl_ms, key=key,
                           user_meta=user_meta)

    def begin_write_block(self, block_id: int, length: int, *, checksum: int = 0,
                          storage_class: int = STORAGE_CLASS_UNSPECIFIED, ttl_ms: int = 0) -> PendingWrite:
        """Starts storing a file block. A block id already stored is replaced atomically (readers
        that opened the old copy keep reading it). Class unspecified = durable: a block the
        namespace references must not vanish by eviction unless its directory says cache."""
        name = self._block_name(block_id)
        cls = DURABLE if storage_class == STORAGE_CLASS_UNSPECIFIED else storage_class
        return self._begin(name, layout.KIND_BLOCK, length, checksum, cls, ttl_ms, block_id=block_id)

    def _begin(self, name: str, kind: int, length: int, checksum: int, storage_class: int, ttl_ms: int,
               *, key: str = "", block_id: int = 0, user_meta: bytes = b"") -> PendingWrite:
        if length < 0:
            raise InvalidArgument("negative length")
        if storage_class not in (CACHE, DURABLE):
            raise InvalidArgument(f"unknown storage class {storage_class}")
        if len(user_meta) > layout.MAX_USER_META:
            raise InvalidArgument(f"user metadata of {len(user_meta)} bytes exceeds {layout.MAX_USER_META}")
        if ttl_ms < 0:
            raise InvalidArgument("negative ttl")
        now = self.clock()
        header = layout.StoredHeader(kind, storage_class, length, 0, now, ttl_ms, block_id, key, user_meta,
                                     (0,) * layout.chunk_count(length))
        size = header.header_size + length
        index = self._reserve(size)
        entry = Entry(name, index, kind, size, length, storage_class, now + ttl_ms if ttl_ms else 0, now,
                      block_id)
        taken = self._temp_pool.take(index) if self._temp_pool is not None else None
        if taken is None:
            try:
                taken = create_temp(os.path.join(self.dirs[index].path, TMP), FILE_MODE)
            except OSError:
                self._release(entry)
                raise
        tmp_path, fd = taken
        try:
            self._fallocate(fd, index, size)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp_path)
            self._release(entry)
            raise
        return PendingWrite(self, entry, header, tmp_path, self._path_of(entry), fd, checksum)

    def _reserve(self, size: int) -> int:
        """Picks the dir with the most room, evicting cache data if none has enough."""
        with self.lock:
            # One statvfs per dir per write: it is a good share of a small write's cost.
            rooms = [d.room() for d in self.dirs]
            for index in sorted(range(len(self.dirs)), key=rooms.__getitem__, reverse=True):
                data_dir = self.dirs[index]
                room = rooms[index]
                if room < size and self._reclaim is not None and self._reclaim(index, size):
                    room = data_dir.room()
                if room >= size:
                    data_dir.reserved += size
                    return index
        raise NoSpace(f"no data dir has room for {size} bytes")

    def _fallocate(self, fd: int, index: int, size: int) -> None:
        if size == 0:
            return
        for attempt in (1, 2):
            try:
                os.posix_fallocate(fd, 0, size)
                return
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                if attempt == 2 or self._reclaim is None:
                    break
                # The disk is fuller than our accounting says (a shared fs): evict, retry once.
                # This write is already counted in `reserved`, so it asks for nothing extra.
                with self.lock:
                    self._reclaim(index, 0)
        raise NoSpace(f"data dir {self.dirs[index].path} is full")

    def _release(self, entry: Entry) -> None:
        with self.lock:
            self.dirs[entry.dir_index].reserved -= entry.size

    def _publish(self, entry: Entry, tmp_path: str, final_path: str) -> bool:
        """Renames the temp file into place (lock held, so a concurrent re-put or eviction of the
        same name cannot interleave). Whatever happens, the reservation is released and no temp
        file is left behind."""
        with self.lock:
            self.dirs[entry.dir_index].reserved -= entry.size
            try:
                existing = self._inventory.get(entry.name)
                if existing is not None and entry.kind == layout.KIND_OBJECT \
                        and not existing.expired(self.clock()):
                    os.unlink(tmp_path)
                    return False
                shard = os.path.dirname(final_path)
                if shard not in self._made_shards:
                    os.makedirs(shard, exist_ok=True)
                    self._made_shards.add(shard)
                os.rename(tmp_path, final_path)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp_path)
                raise
            if existing is not None:
                self._forget(existing)
                if existing.dir_index != entry.dir_index:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(self._path_of(existing))
            entry.last_access_ms = self.clock()
            self._remember(entry)
        return True

    def put_object(self, key: str, data: bytes | bytearray | memoryview, **kwargs: int | bytes) -> bool:
        """Stores a KV object from memory. True = stored now, False = it was already stored."""
        pending = self.begin_put(key, len(data), **kwargs)  # type: ignore[arg-type]
        if pending is None:
            return False
        with pending:
            pending.receive(_copier(data))
            return pending.commit()

    def write_block(self, block_id: int, data: bytes | bytearray | memoryview, **kwargs: int) -> None:
        with self.begin_write_block(block_id, len(data), **kwargs) as pending:
            pending.receive(_copier(data))
            pending.commit()

    # -- reads -------------------------------------------------------------------------------------

    def open_object(self, key: str) -> StoredFile | None:
        """The stored object, open, or None on a miss (absent, expired, evicted meanwhile)."""
        stored = self._open(self._object_name(key))
        if stored is not None and stored.header.key != key:  # a 128-bit hash collision: still a miss
            stored.close()
            return None
        return stored

    def open_block(self, block_id: int) -> StoredFile | None:
        return self._open(self._block_name(block_id))

    def _open(self, name: str) -> StoredFile | None:
        with self.lock:
            entry = self._inventory.get(name)
            now = self.clock()
            if entry is None or entry.expired(now):
                return None
            entry.last_access_ms = now
            cached = self._open_files.get(name)
            if cached is not None and cached[0] is entry:
                self._open_files.move_to_end(name)
                # A duplicate under the lock: the cached fd may be closed by _forget right after.
                return StoredFile(os.dup(cached[1]), cached[2])
            path = self._path_of(entry)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None   # evicted or deleted between the lookup and the open: a miss
        try:
            header = read_header(fd)
        except (OSError, ProtocolError) as exc:
            os.close(fd)
            raise Corrupt(f"unreadable stored header in {path}: {exc}") from None
        if self.open_files_limit:
            self._keep_open(entry, fd, header)
        return StoredFile(fd, header)

    def _keep_open(self, entry: Entry, fd: int, header: layout.StoredHeader) -> None:
        """Caches a duplicate of a just-opened file's fd, if `entry` is still the inventory's
        (a file replaced or removed meanwhile is never cached)."""
        with self.lock:
            if self._inventory.get(entry.name) is not entry:
                return
            previous = self._open_files.pop(entry.name, None)
            if previous is not None:
                os.close(previous[1])
            self._open_files[entry.name] = (entry, os.dup(fd), header)
            while len(self._open_files) > self.open_files_limit:
                _, (_, old_fd, _) = self._open_files.popitem(last=False)
                os.close(old_fd)

    def exists(self, keys: Iterable[str], *, pin: bool = False) -> int:
        """Length of the prefix of `keys` that is stored; with `pin`, each hit stays readable
        (not evictable) for the pin grace period."""
        names = [self._object_name(key) for key in keys]
        hits = 0
        with self.lock:
            now = self.clock()
            for name in names:
                entry = self._inventory.get(name)
                if entry is None or entry.expired(now):
                    break
                if pin:
                    entry.pinned_until_ms = max(entry.pinned_until_ms, now + self.pin_grace_ms)
                hits += 1
        return hits

    def contains_block(self, block_id: int) -> bool:
        with self.lock:
            entry = self._inventory.get(self._block_name(block_id))
            return entry is not None and not entry.expired(self.clock())

    # -- deletes -----------------------------------------------------------------------------------

    def delete_object(self, key: str) -> bool:
        return self._delete(self._object_name(key))

    def delete_block(self, block_id: int) -> bool:
        return self._delete(self._block_name(block_id))

    def _delete(self, name: str) -> bool:
        with self.lock:
            entry = self._inventory.get(name)
            if entry is None:
                return False
            self._remove_locked(entry)
            return True

    def report_bad_object(self, key: str) -> bool:
        return self._report_bad(self._object_name(key))

    def report_bad_block(self, block_id: int) -> bool:
        return self._report_bad(self._block_name(block_id))

    def _report_bad(self, name: str) -> bool:
        """A client saw a checksum mismatch. The copy is re-verified first: a copy that is good
        on disk was damaged in transit and is kept (dropping the only replica of a durable block
        for a network error would lose data). True = a bad copy was dropped."""
        try:
            stored = self._open(name)
        except Corrupt:
            self.drop_bad(name)
            return True
        if stored is None:
            return False
        with stored:
            if stored.verify():
                log.warning("%s was reported bad but verifies on disk: kept", name)
                return False
        self.drop_bad(name)
        return True

    def drop_bad(self, name: str) -> None:
        """Drops a copy known to be bad; a block is reported to the master in the next heartbeat."""
        with self.lock:
            entry = self._inventory.get(name)
            if entry is None:
                return
            self._remove_locked(entry)
            if entry.kind == layout.KIND_BLOCK:
                self._bad_block_ids.append(entry.block_id)
        log.error("dropped bad copy %s", name)

    def object_name(self, key: str) -> str:
        return self._object_name(key)

    def block_name(self, block_id: int) -> str:
        return self._block_name(block_id)

    # -- eviction support (call with `lock` held) ----------------------------------------------------

    def candidates(self, dir_index: int) -> list[Candidate]:
        now = self.clock()
        return [Candidate(e.name, e.size, e.last_access_ms, e.storage_class, e.expires_at_ms,
                          e.pinned_until_ms > now)
                for e in self._inventory.values() if e.dir_index == dir_index]

    def due_expiries(self) -> list[str]:
        """Names of entries whose TTL has passed (durable ones included: a TTL is explicit),
        except pinned ones, which are looked at again when their pin ends."""
        now = self.clock()
        due: dict[str, None] = {}   # ordered and deduplicated (an entry may have two items)
        deferred: list[tuple[int, str]] = []
        while self._expiries and self._expiries[0][0] <= now:
            _, name = heapq.heappop(self._expiries)
            entry = self._inventory.get(name)
            if entry is None or not entry.expired(now):
                continue   # gone, or replaced by a copy without/with a later TTL (its own item)
            if entry.pinned_until_ms > now:
                deferred.append((entry.pinned_until_ms, name))
            else:
                due[name] = None
        for item in deferred:
            heapq.heappush(self._expiries, item)
        return list(due)

    def evict(self, names: Iterable[str]) -> int:
        """Removes the named entries and returns how many went. Skipped: entries gone or pinned
        meanwhile, and durable ones unless their TTL has passed (readers already miss them).
        Evicted blocks are queued for the next heartbeat."""
        evicted = 0
        with self.lock:
            now = self.clock()
            for name in names:
                entry = self._inventory.get(name)
                if entry is None or entry.pinned_until_ms > now:
                    continue
                if entry.storage_class == DURABLE and not entry.expired(now):
                    continue
                self._remove_locked(entry)
                self.evictions += 1
                evicted += 1
                if entry.kind == layout.KIND_BLOCK:
                    self._evicted_block_ids.append(entry.block_id)
        return evicted

    # -- reporting -----------------------------------------------------------------------------------

    def block_ids(self) -> list[int]:
        with self.lock:
            return [e.block_id for e in self._inventory.values() if e.kind == layout.KIND_BLOCK]

    def take_reports(self) -> tuple[list[int], list[int]]:
        """(evicted block ids, bad block ids) since the last call; give them back with
        `return_reports` if the master could not be told."""
        with self.lock:
            evicted, self._evicted_block_ids = self._evicted_block_ids, []
            bad, self._bad_block_ids = self._bad_block_ids, []
        return evicted, bad

    def return_reports(self, evicted: list[int], bad: list[int]) -> None:
        with self.lock:
            self._evicted_block_ids[:0] = evicted
            self._bad_block_ids[:0] = bad

    def stats(self) -> Stats:
        with self.lock:
            return Stats(self._blocks, self._objects, self.evictions, sum(d.used for d in self.dirs))

    def usage(self) -> Usage:
        """Capacity (configured, capped by the filesystem), our used bytes, and what is still
        available (capped by the filesystem's free space), summed over the dirs."""
        capacity = used = available = 0
        with self.lock:
            for data_dir in self.dirs:
                total, free = data_dir.disk()
                cap = min(data_dir.limit, total) if data_dir.limit else total
                capacity += cap
                used += data_dir.used
                available += max(0, min(cap - data_dir.used - data_dir.reserved, free))
        return Usage(capacity, used, available)


def _copier(data: bytes | bytearray | memoryview) -> Callable[[memoryview], None]:
    source = memoryview(data).cast("B")
    position = 0

    def fill(view: memoryview) -> None:
        nonlocal position
        view[:] = source[position:position + len(view)]
        position += len(view)

    return fill

"""The worker's local store: blocks and KV objects as files under one or more data dirs. A thin
facade over its parts, one job each:

    datadir.py     the layout of a data dir, its lock and space accounting
    storedfile.py  an open stored file and the verification of its bytes
    writes.py      the write pipeline (reserve, temp file, receive + digest, publish)
    inventory.py   the in-memory inventory, the start-up scan, eviction support, block reports
    ttl.py         the TTL heap
    opencache.py   the fd cache of the read path
    recycle.py     freed files kept in tmp/ for the next writes to overwrite
    reaper.py      the unlinks of freed files that are not kept, in a background thread

Every stored file is a `StoredHeader` (core/layout.py) followed by the payload at `header_size`.

Read path: `open_object`/`open_block` hand out an fd and the parsed header, through the fd cache
(opencache.py). Whatever removes or replaces an inventory entry closes its cached fd, so a deleted,
evicted or replaced file is never served from it.

Concurrency: one re-entrant lock guards the inventory, the fd cache and the space accounting;
renames and unlinks that change what a name points to happen under it, so a concurrent re-put and
an eviction cannot unlink each other's file. Bulk I/O happens outside it. A reader holds an open fd,
never the lock: unlinking a file that an fd reads from is safe on Linux, so eviction never breaks a
reader (a freed file is kept for reuse only once no descriptor of it is left: recycle.py).
"""
from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Self

from curvine_py.core import layout
from curvine_py.core.errors import Corrupt, InvalidArgument, ProtocolError
from curvine_py.core.eviction import Candidate
from curvine_py.core.keys import DEFAULT_MAX_KEY_BYTES, validate_key
from curvine_py.proto.curvine.v1.common_pb2 import CACHE, DURABLE, STORAGE_CLASS_UNSPECIFIED
from curvine_py.worker import tmpfiles
from curvine_py.worker.datadir import (
    BLOCKS,
    DEFAULT_FREE_SPACE_RATIO,
    FILE_MODE,
    OBJECTS,
    TMP,
    DataDir,
    Usage,
    load_worker_id,
)
from curvine_py.worker.inventory import Clock, Entry, Inventory, Stats
from curvine_py.worker.opencache import OPEN_FILES, OpenFileCache
from curvine_py.worker.reaper import Reaper
from curvine_py.worker.recycle import FreedFiles
from curvine_py.worker.storedfile import StoredFile, read_header
from curvine_py.worker.tmpfiles import TempFilePool
from curvine_py.worker.writes import PendingWrite, Reclaimer, WritePipeline, copier

__all__ = ["Clock", "Entry", "PendingWrite", "Stats", "Store", "StoredFile", "Usage", "wall_ms"]

log = logging.getLogger(__name__)


def misplaced(name: str, header: layout.StoredHeader) -> str | None:
    """Why a stored file found under inventory name `name` is not the one that name stands for
    (its header holds another kind, block id or key: a misdirected rename, a restore by hand), or
    None. The start-up scan applies the same rule (inventory.py); this is for files swapped since."""
    sub, _, file_name = name.partition("/")
    if sub == BLOCKS:
        if header.kind != layout.KIND_BLOCK:
            return f"holds a stored file of kind {header.kind}, not a block"
        if layout.block_file_name(header.block_id) != file_name:
            return f"holds block {header.block_id:x}"
        return None
    if header.kind != layout.KIND_OBJECT:
        return f"holds a stored file of kind {header.kind}, not an object"
    if layout.object_file_name(header.key) != file_name:
        return f"holds the object of key {header.key!r}"
    return None


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class Store:
    """Blocks and KV objects on local data dirs. `open()` before use, `close()` after.

    Error handling: invalid keys/arguments raise InvalidArgument/NameTooLong, lack of space
    NoSpace, bytes that fail a checksum Corrupt; a miss is None/False, never an error.
    """

    def __init__(self, data_dirs: Sequence[tuple[str, int]], *, max_key_bytes: int = DEFAULT_MAX_KEY_BYTES,
                 pin_grace_ms: int = 30_000, clock: Clock = wall_ms, open_files: int = OPEN_FILES,
                 free_space_ratio: float = DEFAULT_FREE_SPACE_RATIO) -> None:
        if not data_dirs:
            raise InvalidArgument("a worker needs at least one --data-dir")
        self.dirs = [DataDir(path, capacity, free_space_ratio) for path, capacity in data_dirs]
        if len({d.path for d in self.dirs}) != len(self.dirs):
            raise InvalidArgument("the same data dir is listed twice")
        self.max_key_bytes = max_key_bytes
        self.pin_grace_ms = pin_grace_ms
        self.clock = clock
        self.lock = threading.RLock()
        self.mismatched = 0   # copies refused because they are not what their name says (open_block)
        self._open_files = OpenFileCache(open_files)
        self._inventory = Inventory(self.dirs, clock, self._open_files.drop)
        self._writes = WritePipeline(self.dirs, self._inventory, self.lock, clock)
        self.reaper = Reaper(self.dirs)
        self.freed = FreedFiles(self.dirs, reaper=self.reaper)

    @property
    def evictions(self) -> int:
        return self._inventory.evictions

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
            self._writes.known_shards |= self._inventory.scan(index, BLOCKS, layout.KIND_BLOCK)
            self._writes.known_shards |= self._inventory.scan(index, OBJECTS, layout.KIND_OBJECT)
            self.freed.set_capacity(index, data_dir.capacity())
        # Attached once tmp/ is empty: deleted files are kept there for reuse (recycle.py) or
        # unlinked by the reaper's thread (reaper.py).
        self.reaper.start()
        self._inventory.retire = self.freed.retire
        self._writes.freed = self.freed
        log.info("store opened: %d blocks, %d objects, %d bytes in %d dir(s)", self._inventory.blocks,
                 self._inventory.objects, sum(d.used for d in self.dirs), len(self.dirs))

    def close(self) -> None:
        if self._writes.temp_pool is not None:
            self._writes.temp_pool.close()
            self._writes.temp_pool = None
        with self.lock:
            self._open_files.close()
            self._inventory.retire = None
            self._writes.freed = None
        self.freed.close()
        self.reaper.close()
        for data_dir in self.dirs:
            data_dir.unlock()

    def start_temp_pool(self, depth: int = tmpfiles.DEFAULT_DEPTH) -> None:
        """Writes take temp files created ahead by a background thread (tmpfiles.py) instead of
        creating their own on the request path. Call after `open`; `close` stops it."""
        if self._writes.temp_pool is None and depth > 0:
            pool = TempFilePool([os.path.join(d.path, TMP) for d in self.dirs], mode=FILE_MODE, depth=depth)
            pool.start()
            self._writes.temp_pool = pool

    def __enter__(self) -> Self:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def load_worker_id(self) -> str:
        """The worker id persisted in the first data dir, generated once."""
        return load_worker_id(self.dirs[0].path)

    def attach_reclaimer(self, reclaim: Reclaimer) -> None:
        """The evictor's on-demand hook, called (lock held) when a write lacks room."""
        self._writes.reclaim = reclaim

    # -- names -------------------------------------------------------------------------------------

    def object_name(self, key: str) -> str:
        validate_key(key, self.max_key_bytes)
        return f"{OBJECTS}/{layout.object_file_name(key)}"

    @staticmethod
    def block_name(block_id: int) -> str:
        if not 0 <= block_id < 2**64:
            raise InvalidArgument(f"block id {block_id} out of range")
        return f"{BLOCKS}/{layout.block_file_name(block_id)}"

    # -- writes ------------------------------------------------------------------------------------

    def begin_put(self, key: str, length: int, *, checksum: int = 0, user_meta: bytes = b"",
                  storage_class: int = STORAGE_CLASS_UNSPECIFIED, ttl_ms: int = 0) -> PendingWrite | None:
        """Starts storing a KV object; None when the key is already stored (write-once: the caller
        drops the payload and reports success). Class unspecified = cache (the LMCache L2 tier)."""
        name = self.object_name(key)
        with self.lock:
            if self._inventory.live(name, self.clock()) is not None:
                return None
        cls = CACHE if storage_class == STORAGE_CLASS_UNSPECIFIED else storage_class
        return self._writes.begin(name, layout.KIND_OBJECT, length, checksum, cls, ttl_ms, key=key,
                                  user_meta=user_meta)

    def begin_write_block(self, block_id: int, length: int, *, checksum: int = 0,
                          storage_class: int = STORAGE_CLASS_UNSPECIFIED, ttl_ms: int = 0) -> PendingWrite:
        """Starts storing a file block. A block id already stored is replaced atomically (readers
        that opened the old copy keep reading it). Class unspecified = durable: a block the
        namespace references must not vanish by eviction unless its directory says cache."""
        name = self.block_name(block_id)
        cls = DURABLE if storage_class == STORAGE_CLASS_UNSPECIFIED else storage_class
        return self._writes.begin(name, layout.KIND_BLOCK, length, checksum, cls, ttl_ms, block_id=block_id)

    def put_object(self, key: str, data: bytes | bytearray | memoryview, **kwargs: int | bytes) -> bool:
        """Stores a KV object from memory. True = stored now, False = it was already stored."""
        pending = self.begin_put(key, len(data), **kwargs)  # type: ignore[arg-type]
        if pending is None:
            return False
        with pending:
            pending.receive(copier(data))
            return pending.commit()

    def write_block(self, block_id: int, data: bytes | bytearray | memoryview, **kwargs: int) -> None:
        with self.begin_write_block(block_id, len(data), **kwargs) as pending:
            pending.receive(copier(data))
            pending.commit()

    # -- reads -------------------------------------------------------------------------------------

    def open_object(self, key: str) -> StoredFile | None:
        """The stored object, open, or None on a miss (absent, expired, evicted meanwhile).
        Corrupt when the file under the key's name is not an object of that key (a misplaced
        copy: dropped and counted); a true 128-bit hash collision is a miss and stays."""
        name = self.object_name(key)
        opened = self.open_entry(name)
        if opened is None:
            return None
        entry, stored = opened
        if stored.header.key == key:   # the one compare of the hot path: the header is parsed already
            return stored
        stored.close()
        if misplaced(name, stored.header) is None:
            return None                # another key with the same 128-bit hash
        raise self._refuse(name, entry, f"holds the object of key {stored.header.key!r}, not {key!r}")

    def open_block(self, block_id: int, checksum: int = 0) -> StoredFile | None:
        """The stored block, open, or None when absent. Corrupt when the file under its name holds
        another block (its header's id) or, with `checksum` (the master's record of the committed
        block; 0 = unknown), other bytes than those committed: the copy is dropped and counted."""
        name = self.block_name(block_id)
        opened = self.open_entry(name)
        if opened is None:
            return None
        entry, stored = opened
        header = stored.header
        if header.block_id == block_id and header.kind == layout.KIND_BLOCK \
                and (not checksum or header.checksum == checksum):
            return stored
        stored.close()
        reason = misplaced(name, header) or (f"holds checksum {header.checksum:016x}, the master recorded "
                                             f"{checksum:016x}")
        raise self._refuse(name, entry, reason)

    def check_copy(self, name: str, header: layout.StoredHeader, checksum: int = 0) -> str | None:
        """Why the stored file `name` with `header` is not the copy it should be (None: it is): it
        holds another block or key, or a checksum other than `checksum` (0 = not checked)."""
        wrong = misplaced(name, header)
        if wrong is None and checksum and header.checksum != checksum:
            wrong = f"holds checksum {header.checksum:016x}, the master recorded {checksum:016x}"
        return wrong

    def _refuse(self, name: str, entry: Entry, reason: str) -> Corrupt:
        """A copy that is not what its name says: dropped (a block is reported bad to the master
        with the next heartbeat), counted, and the error to raise."""
        with self.lock:
            self.mismatched += 1
        log.error("%s %s: refused", name, reason)
        self.drop_if_current(name, entry)
        return Corrupt(f"{name} {reason}: dropped")

    def open_entry(self, name: str, *, touch: bool = True) -> tuple[Entry, StoredFile] | None:
        """The inventory entry and its stored file, open (None on a miss): what a verifier needs to
        drop exactly the copy it read (`drop_if_current`), never a newer one. `touch=False` (the
        scrubber) neither counts as an access for LRU eviction nor fills the fd cache."""
        with self.lock:
            now = self.clock()
            entry = self._inventory.live(name, now)
            if entry is None:
                return None
            if touch:
                entry.last_access_ms = now
            cached = self._open_files.get(name, entry)
            if cached is not None:
                return entry, cached
            path = self._inventory.path_of(entry)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None   # evicted or deleted between the lookup and the open: a miss
        try:
            header = read_header(fd)
        except (OSError, ProtocolError) as exc:
            os.close(fd)
            raise Corrupt(f"unreadable stored header in {path}: {exc}") from None
        if self._open_files.limit and touch:
            with self.lock:
                # A file replaced or removed meanwhile is never cached.
                if self._inventory.get(name) is entry:
                    self._open_files.keep(name, entry, fd, header)
        return entry, StoredFile(fd, header)

    def names(self) -> list[tuple[str, int]]:
        """(name, bytes on disk) of every stored file, a snapshot (for the scrubber)."""
        with self.lock:
            return self._inventory.names()

    def drop_if_current(self, name: str, entry: Entry | None) -> bool:
        """Drops a copy found bad, if the inventory still holds that very copy (`entry`; None = the
        header itself was unreadable: whatever is there). A copy replaced meanwhile is not touched."""
        with self.lock:
            if entry is not None and self._inventory.get(name) is not entry:
                return False
            if not self._inventory.drop_bad(name):
                return False
        log.error("dropped bad copy %s", name)
        return True

    def exists(self, keys: Iterable[str], *, pin: bool = False) -> int:
        """Length of the prefix of `keys` that is stored; with `pin`, each hit stays readable
        (not evictable) for the pin grace period."""
        names = [self.object_name(key) for key in keys]
        hits = 0
        with self.lock:
            now = self.clock()
            for name in names:
                entry = self._inventory.live(name, now)
                if entry is None:
                    break
                if pin:
                    entry.pinned_until_ms = max(entry.pinned_until_ms, now + self.pin_grace_ms)
                hits += 1
        return hits

    def contains_block(self, block_id: int) -> bool:
        with self.lock:
            return self._inventory.live(self.block_name(block_id), self.clock()) is not None

    # -- deletes -----------------------------------------------------------------------------------

    def delete_object(self, key: str) -> bool:
        return self._delete(self.object_name(key))

    def delete_block(self, block_id: int) -> bool:
        return self._delete(self.block_name(block_id))

    def _delete(self, name: str) -> bool:
        with self.lock:
            entry = self._inventory.get(name)
            if entry is None:
                return False
            self._inventory.remove(entry)
            return True

    def report_bad_object(self, key: str) -> bool:
        return self._report_bad(self.object_name(key))

    def report_bad_block(self, block_id: int, checksum: int = 0) -> bool:
        return self._report_bad(self.block_name(block_id), checksum)

    def _report_bad(self, name: str, checksum: int = 0) -> bool:
        """A client saw a checksum mismatch. The copy is re-verified first: a copy that is good
        on disk (and is the block or object its name says, with the master's `checksum` when
        given) was damaged in transit and is kept (dropping the only replica of a durable block
        for a network error would lose data). True = a bad copy was dropped."""
        try:
            opened = self.open_entry(name, touch=False)
        except Corrupt:
            return self.drop_if_current(name, None)
        if opened is None:
            return False
        entry, stored = opened
        with stored:
            if self.check_copy(name, stored.header, checksum) is None and stored.verify():
                log.warning("%s was reported bad but verifies on disk: kept", name)
                return False
        return self.drop_if_current(name, entry)

    def drop_bad(self, name: str, copy: StoredFile | None = None) -> None:
        """Drops a copy known to be bad; a block is reported to the master in the next heartbeat.
        With `copy` (the open file found bad), only if the name still points at that very file: a
        copy rewritten meanwhile is good and stays."""
        with self.lock:
            entry = self._inventory.get(name)
            if entry is None:
                return
            if copy is not None and copy.fd >= 0:
                try:
                    if os.stat(self._inventory.path_of(entry)).st_ino != os.fstat(copy.fd).st_ino:
                        return
                except FileNotFoundError:
                    pass
            self._inventory.drop_bad(name)
        log.error("dropped bad copy %s", name)

    # -- eviction support (call with `lock` held) ----------------------------------------------------

    def candidates(self, dir_index: int) -> list[Candidate]:
        return self._inventory.candidates(dir_index)

    def due_expiries(self) -> list[str]:
        """Names of entries whose TTL has passed (durable ones included: a TTL is explicit),
        except pinned ones, which are looked at again when their pin ends."""
        return self._inventory.due_expiries()

    def evict(self, names: Iterable[str]) -> int:
        """Removes the named entries and returns how many went. Skipped: entries gone or pinned
        meanwhile, and durable ones unless their TTL has passed (readers already miss them).
        Evicted blocks are queued for the next heartbeat."""
        with self.lock:
            return self._inventory.evict(names)

    # -- reporting -----------------------------------------------------------------------------------

    def block_ids(self) -> list[int]:
        with self.lock:
            return self._inventory.block_ids()

    def take_reports(self) -> tuple[list[int], list[int]]:
        """(evicted block ids, bad block ids) since the last call; give them back with
        `return_reports` if the master could not be told."""
        with self.lock:
            return self._inventory.take_reports()

    def return_reports(self, evicted: list[int], bad: list[int]) -> None:
        with self.lock:
            self._inventory.return_reports(evicted, bad)

    def stats(self) -> Stats:
        with self.lock:
            inventory = self._inventory
            return Stats(inventory.blocks, inventory.objects, inventory.evictions, sum(d.used for d in self.dirs))

    def usage(self) -> Usage:
        """Capacity (configured, capped by the file system less its free-space reserve), our used
        bytes, and what is still available (capped by the free space above the reserve), summed
        over the dirs."""
        capacity = used = available = 0
        with self.lock:
            for data_dir in self.dirs:
                cap, room = data_dir.usage()
                capacity += cap
                used += data_dir.used
                available += room
        return Usage(capacity, used, available)

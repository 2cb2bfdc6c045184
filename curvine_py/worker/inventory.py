"""The in-memory inventory of a worker's stored files: one `Entry` per block or KV object, the space
each takes in its data dir's accounting, the start-up scan that rebuilds it from the stored headers,
the eviction support over it (candidates, evict), and the block reports queued for the master.

Time comes from an injected clock (milliseconds), so tests drive TTLs and pins with a fake one.

Concurrency: not thread-safe by itself; every call after `scan` is made with the store lock held.
"""
from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from curvine_py.core import layout
from curvine_py.core.errors import CurvineError, ProtocolError
from curvine_py.core.eviction import Candidate
from curvine_py.proto.curvine.v1.common_pb2 import DURABLE
from curvine_py.worker.datadir import DataDir
from curvine_py.worker.storedfile import read_header
from curvine_py.worker.ttl import ExpiryQueue

log = logging.getLogger(__name__)

Clock = Callable[[], int]


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
class Stats:
    blocks: int
    objects: int
    evictions: int
    used: int


class Inventory:
    """Entries by name. `on_forget(name)` is called whenever an entry leaves (the fd cache hook)."""

    def __init__(self, dirs: Sequence[DataDir], clock: Clock, on_forget: Callable[[str], None]) -> None:
        self._dirs = dirs
        self._clock = clock
        self._on_forget = on_forget
        self._entries: dict[str, Entry] = {}
        self._expiries = ExpiryQueue()
        self.blocks = 0
        self.objects = 0
        self.evictions = 0
        self._evicted_block_ids: list[int] = []
        self._bad_block_ids: list[int] = []
        self.retire: Callable[[int, str, int], bool] | None = None   # (dir index, path, size)

    def get(self, name: str) -> Entry | None:
        return self._entries.get(name)

    def live(self, name: str, now: int) -> Entry | None:
        """The entry, unless it is absent or expired."""
        entry = self._entries.get(name)
        return None if entry is None or entry.expired(now) else entry

    def remember(self, entry: Entry) -> None:
        self._entries[entry.name] = entry
        if entry.expires_at_ms:
            self._expiries.push(entry.expires_at_ms, entry.name)
        self._dirs[entry.dir_index].used += entry.size
        if entry.kind == layout.KIND_BLOCK:
            self.blocks += 1
        else:
            self.objects += 1

    def forget(self, entry: Entry) -> None:
        del self._entries[entry.name]
        self._on_forget(entry.name)
        self._dirs[entry.dir_index].used -= entry.size
        if entry.kind == layout.KIND_BLOCK:
            self.blocks -= 1
        else:
            self.objects -= 1

    def path_of(self, entry: Entry) -> str:
        sub, _, file_name = entry.name.partition("/")
        return os.path.join(self._dirs[entry.dir_index].path, sub, layout.shard_dir(file_name), file_name)

    def remove(self, entry: Entry, *, reuse: bool = True) -> None:
        """Forgets the entry and unlinks its file, or hands it to `retire` (recycle.py: kept for
        a later write to overwrite, or unlinked by the reaper's thread) when one is attached and
        takes it."""
        self.forget(entry)
        path = self.path_of(entry)
        if reuse and self.retire is not None and self.retire(entry.dir_index, path, entry.size):
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    def drop_bad(self, name: str) -> bool:
        """Removes a copy known to be bad and queues a block for the master; False if absent."""
        entry = self._entries.get(name)
        if entry is None:
            return False
        self.remove(entry, reuse=False)   # a bad copy's blocks are not trusted again
        if entry.kind == layout.KIND_BLOCK:
            self._bad_block_ids.append(entry.block_id)
        return True

    # -- the start-up scan -------------------------------------------------------------------------

    def scan(self, index: int, sub: str, kind: int) -> set[str]:
        """Adopts the stored files of one tree of one dir (a corrupt, misnamed or truncated file is
        removed and logged); returns the shard directories seen."""
        root = os.path.join(self._dirs[index].path, sub)
        now = self._clock()
        shards: set[str] = set()
        for shard in os.scandir(root):
            if not shard.is_dir(follow_symlinks=False):
                _discard(shard.path, "not a shard directory")
                continue
            for item in os.scandir(shard.path):
                try:
                    entry = _entry_from_disk(index, sub, kind, shard.name, item, now)
                except (OSError, ProtocolError, CurvineError, UnicodeDecodeError, ValueError) as exc:
                    _discard(item.path, str(exc))
                    continue
                if self._adopt(entry):
                    shards.add(shard.path)
        return shards

    def _adopt(self, entry: Entry) -> bool:
        previous = self._entries.get(entry.name)
        if previous is not None:
            # The same name in two dirs (a crash between publishing and unlinking the old copy):
            # keep the most recent copy.
            loser = entry if previous.last_access_ms >= entry.last_access_ms else previous
            _discard(self.path_of(loser), "duplicate of a newer copy")
            if loser is entry:
                return False
            self.forget(previous)
        self.remember(entry)
        return True

    # -- eviction support ----------------------------------------------------------------------------

    def candidates(self, dir_index: int) -> list[Candidate]:
        now = self._clock()
        return [Candidate(e.name, e.size, e.last_access_ms, e.storage_class == DURABLE, e.expires_at_ms,
                          e.pinned_until_ms > now)
                for e in self._entries.values() if e.dir_index == dir_index]

    def due_expiries(self) -> list[str]:
        return self._expiries.due(self._clock(), self._entries.get)

    def evict(self, names: Iterable[str]) -> int:
        """Removes the named entries and returns how many went. Skipped: entries gone or pinned
        meanwhile, and durable ones unless their TTL has passed (readers already miss them).
        Evicted blocks are queued for the next heartbeat."""
        evicted = 0
        now = self._clock()
        for name in names:
            entry = self._entries.get(name)
            if entry is None or entry.pinned_until_ms > now:
                continue
            if entry.storage_class == DURABLE and not entry.expired(now):
                continue
            self.remove(entry)
            self.evictions += 1
            evicted += 1
            if entry.kind == layout.KIND_BLOCK:
                self._evicted_block_ids.append(entry.block_id)
        return evicted

    # -- reports -------------------------------------------------------------------------------------

    def names(self) -> list[tuple[str, int]]:
        return [(e.name, e.size) for e in self._entries.values()]

    def block_ids(self) -> list[int]:
        return [e.block_id for e in self._entries.values() if e.kind == layout.KIND_BLOCK]

    def take_reports(self) -> tuple[list[int], list[int]]:
        evicted, self._evicted_block_ids = self._evicted_block_ids, []
        bad, self._bad_block_ids = self._bad_block_ids, []
        return evicted, bad

    def return_reports(self, evicted: list[int], bad: list[int]) -> None:
        self._evicted_block_ids[:0] = evicted
        self._bad_block_ids[:0] = bad


def _entry_from_disk(index: int, sub: str, kind: int, shard: str, item: os.DirEntry[str], now: int) -> Entry:
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


def _discard(path: str, why: str) -> None:
    log.warning("removing %s: %s", path, why)
    with contextlib.suppress(FileNotFoundError, IsADirectoryError):
        os.unlink(path)

"""Runs of chunks for the mount's reads of stored blocks: one READ_BLOCK fetches several chunks,
and a sequential reader's next chunks are fetched ahead of its requests, within a memory budget.

Why runs: a cold sequential read reaches the mount as 1 MiB requests (the kernel's largest FUSE
read), each of which cost one READ_BLOCK: a request frame, a worker round of Python and a reply head
per MiB. Here the first read of a chunk fetches `chunks` chunks from it with one request, verified
as every read is, and the kernel's next requests, already in flight behind it, find their chunk
fetched or being fetched. A request for a whole chunk is answered with a view of the run's buffer
(no copy; pyfuse3 copies it into the kernel before any other task runs).

Why ahead (`ahead` bytes, issue 14): with runs fetched on demand on the one trio thread, that
thread received and verified every byte as well as replying it into the kernel. With a `fetch` that
runs in worker threads (fuse/threadfetch.py, fuse/blockrecv.py: one GIL-releasing recv per chunk,
then its digest) and `start()`ed in the mount's nursery, a read also starts the runs of the next
`ahead` bytes of its block (Files extends the window into the next blocks), and the FUSE
handlers only wait for their chunk's arrival and reply from its buffer. A whole small file (a
32 MiB KV chunk) is then being fetched from its first read on.

Staleness: blocks are immutable, so a chunk kept by (block id, offset) is never stale; a file
rewritten elsewhere has new block ids at its next open (close-to-open), and the old chunks are
simply never asked for again.

Memory: every run buffer this object holds (being fetched, listed, or pooled for reuse) counts
against `budget`; a run that does not fit is not started (a read that needs it then goes the
direct way, Files._fast_read). A read that needs room drops fetched, unwaited chunks oldest first;
fetching ahead never drops anything. The last release of a file drops its unread chunks
(`release`); pooled buffers beyond POOL_KEEP are freed after TRIM_S seconds without a run.
`counters` says what was fetched, held and dropped (tests, the stats xattr).

Resource handling: run buffers are recycled once every chunk of the run was taken or dropped and
no task waits on one (the same reply-then-reuse rule as readbuf.py: recycled buffers are handed out
again only from a later `_buffer()` call, which comes after the reply from that buffer went out or
after the copy out of it was done);
a run that fails wakes its waiters with FastPathMiss and leaves nothing behind, so their reads go
to the threaded client. A fetch is never abandoned mid-way (the thread fetch waits for its
thread), so no buffer is reused while something may still write into it.
"""
from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import trio

from curvine_py.client.buffers import aligned
from curvine_py.client.membership import View
from curvine_py.core import layout
from curvine_py.core.domain import BlockInfo
from curvine_py.core.rules import verifiable_range
from curvine_py.fuse.dataplane import FastPathMiss, TrioBlockReader

log = logging.getLogger(__name__)

CHUNK = layout.CHUNK_SIZE
# Run buffers are reused, never fresh while a pooled one is free: writing into fresh anonymous memory
# costs a page fault (and the kernel zeroing the page) per 4 KiB, which measured as much CPU per MiB
# as a whole cold read's. An idle mount keeps POOL_KEEP of them.
POOL_KEEP = 8
TRIM_S = 5.0

# fetch(view, block, offset, length, out, minimum) -> the verified bytes, in `out`; FastPathMiss
Fetch = Callable[[View, BlockInfo, int, int, memoryview, int], Awaitable[memoryview]]


@dataclass(slots=True)
class RunCounters:
    """What the runs did, for tests and `getfattr -n user.curvine.stats MOUNT` (key "runs")."""
    runs: int = 0            # READ_BLOCKs sent for runs
    ahead: int = 0           # of them, started ahead of any read of their chunks
    fetched_bytes: int = 0   # verified bytes received
    held_bytes: int = 0      # run buffers held now (being fetched, listed or pooled)
    peak_bytes: int = 0      # the most ever held at once (never above budget_bytes)
    budget_bytes: int = 0
    dropped: int = 0         # chunks dropped unread (room for a read, or their file's last release)
    refused: int = 0         # runs not started for lack of room
    failed: int = 0          # runs whose fetch failed (their reads went to the threaded client)

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(slots=True, eq=False)
class _Run:
    buffer: memoryview
    ino: int
    done: trio.Event = field(default_factory=trio.Event)
    error: str | None = None
    received: int = 0
    left: int = 0           # entries of this run still listed
    released: bool = False  # its file's last handle went while it was fetched: drop it when done


@dataclass(slots=True, eq=False)
class _Entry:
    run: _Run
    at: int                 # this chunk's offset in the run's buffer
    waiters: int = 0
    used: int = 0           # bytes of it copied out so far


class ChunkRuns:
    def __init__(self, reader: TrioBlockReader, *, chunks: int = 4, budget: int = 64 * CHUNK,
                 ahead: int = 0, fetch: Fetch | None = None, local: bool = False) -> None:
        """`fetch`: how a run is fetched (default: the reader's trio sockets); `ahead`: bytes
        fetched ahead of a read (needs `start()`); `local`: runs for blocks stored on this node too
        (a `fetch` that reads those by descriptor in threads)."""
        self._reader = reader
        self._fetch_fn: Fetch = fetch or reader.read
        self._chunks = chunks
        self._run_bytes = chunks * CHUNK
        self._budget = budget
        self.ahead = ahead
        self._local = local
        self._entries: OrderedDict[tuple[int, int], _Entry] = OrderedDict()
        self._free: list[memoryview] = []
        self._returned: list[memoryview] = []
        self._nursery: trio.Nursery | None = None
        self.counters = RunCounters(budget_bytes=budget)

    @property
    def runs(self) -> int:
        return self.counters.runs

    async def start(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Runs fetches in the background until cancelled (the mount's nursery, fuse/main.py),
        and frees the pool beyond POOL_KEEP buffers once no run started for TRIM_S seconds."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            try:
                while True:
                    started = self.counters.runs
                    await trio.sleep(TRIM_S)
                    if self.counters.runs == started:
                        self._trim()
            finally:
                self._nursery = None

    def wanted(self, view: View, block: BlockInfo, length: int, *, first: bool = False) -> bool:
        """Whether a read of `length` bytes of `block` goes through runs: whole-chunk reads from a
        worker on another node (unless `local`, a local owner's file is read by descriptor on the
        trio thread, with no request cost), and with `ahead`, any read of a file's `first` chunk
        (it starts the fetch of the file's first `ahead` bytes)."""
        return ((length >= CHUNK or (first and self.ahead > 0))
                and (self._local or not self._reader.serves_locally(view, block)))

    def listed(self, block: BlockInfo, start: int) -> bool:
        return (block.block_id, start - start % CHUNK) in self._entries

    async def chunk(self, view: View, block: BlockInfo, start: int, ino: int = 0) -> memoryview | None:
        """The verified stored bytes of the chunk at `start` (a multiple of CHUNK) of `block`, or
        None when it is not listed and no run fits the budget. Use them before the next await,
        then call `used` (or `taken` if the read took them all). Raises FastPathMiss."""
        key = (block.block_id, start)
        entry = self._entries.get(key)
        if entry is None:
            if not self._room(drop=True):
                return None
            if self._nursery is None:
                entry = await self._fetch(view, block, start, ino)
            else:
                entry, _count = self._begin(view, block, start, ino, ahead=False)
        if not entry.run.done.is_set():
            entry.waiters += 1
            try:
                await entry.run.done.wait()
            finally:
                entry.waiters -= 1
        run = entry.run
        if run.error is not None:
            raise FastPathMiss(run.error)
        return run.buffer[entry.at:min(entry.at + CHUNK, run.received)]

    def fetch_ahead(self, view: View, block: BlockInfo, start: int, end: int, ino: int) -> bool:
        """Starts runs for the chunks of `block` in [start, end) not listed yet, as far as the
        budget allows without dropping anything; False when the budget stopped it."""
        if self._nursery is None or not self.ahead:
            return False
        first = start - start % CHUNK
        end = min(end, block.length)
        # From the last listed chunk of the window on: a sequential reader's window moves by a chunk
        # per read, so this is a lookup or two; the chunks before it were listed by earlier reads
        # (or taken, or dropped for room: fetched again only when read).
        position = end - 1 - (end - 1) % CHUNK
        while position >= first and (block.block_id, position) not in self._entries:
            position -= CHUNK
        position = max(first, position + CHUNK if position >= first else first)
        while position < end:
            if (block.block_id, position) in self._entries:
                position += CHUNK
                continue
            if not self._room(drop=False):
                self.counters.refused += 1
                return False
            _entry, count = self._begin(view, block, position, ino, ahead=True)
            position += count * CHUNK
        return True

    def used(self, block: BlockInfo, start: int, count: int) -> None:
        """`count` bytes of the chunk at `start` were copied out; once all of it was, it is taken
        (the kernel does not ask for a page it holds again; if it did, the chunk is re-fetched)."""
        entry = self._entries.get((block.block_id, start))
        if entry is not None:
            entry.used += count
            if entry.used >= min(CHUNK, entry.run.received - entry.at):
                self.taken(block, start)

    def taken(self, block: BlockInfo, start: int) -> None:
        entry = self._entries.pop((block.block_id, start), None)
        if entry is not None:
            self._release(entry.run)

    def release(self, ino: int) -> None:
        """The last handle of inode `ino` was released: its unread chunks go (those still being
        fetched go when they arrive)."""
        for key, entry in list(self._entries.items()):
            if entry.run.ino != ino or entry.waiters:
                continue
            if entry.run.done.is_set():
                self._drop(key, entry)
            else:
                entry.run.released = True

    # -- internals ---------------------------------------------------------------------------
    def _drop(self, key: tuple[int, int], entry: _Entry) -> None:
        del self._entries[key]
        self.counters.dropped += 1
        self._release(entry.run)

    def _release(self, run: _Run) -> None:
        run.left -= 1
        if run.left == 0 and run.error is None:
            self._returned.append(run.buffer)       # reused after this reply went out

    def _trim(self) -> None:
        """Frees the pooled buffers beyond POOL_KEEP (each is unmapped once no reply view refers
        to it any more)."""
        pooled = self._free + self._returned
        self._free, self._returned = pooled[:POOL_KEEP], []
        self._hold(-self._run_bytes * (len(pooled) - len(self._free)))

    def _failed(self, block: BlockInfo, start: int, run: _Run, entries: list[_Entry], error: str) -> None:
        run.error = error
        self.counters.failed += 1
        for i, entry in enumerate(entries):      # nothing of a failed run stays listed
            key = (block.block_id, start + i * CHUNK)
            if self._entries.get(key) is entry:
                del self._entries[key]
        self._hold(-self._run_bytes)    # its buffer is not reused

    def _hold(self, change: int) -> None:
        counters = self.counters
        counters.held_bytes += change
        counters.peak_bytes = max(counters.peak_bytes, counters.held_bytes)

    def _buffer(self) -> memoryview:
        if self._returned:
            self._free.extend(self._returned)
            self._returned.clear()
        if self._free:
            return self._free.pop()
        self._hold(self._run_bytes)
        return aligned(self._run_bytes)

    def _room(self, *, drop: bool) -> bool:
        """Whether one more run buffer fits the budget (a pooled one is reused, so it fits);
        with `drop`, fetched unwaited chunks are dropped oldest first to make room."""
        def fits() -> bool:
            spare = bool(self._free or self._returned)
            return self.counters.held_bytes + (0 if spare else self._run_bytes) <= self._budget
        if fits():
            return True
        if drop:
            for key, entry in list(self._entries.items()):
                if entry.run.done.is_set() and entry.waiters == 0:
                    self._drop(key, entry)
                    if fits():
                        return True
        return False

    def _list(self, block: BlockInfo, start: int, ino: int) -> tuple[_Run, list[_Entry]]:
        count = 1
        while (count < self._chunks and start + count * CHUNK < block.length
               and (block.block_id, start + count * CHUNK) not in self._entries):
            count += 1
        run = _Run(self._buffer(), ino, left=count)
        entries = [_Entry(run, i * CHUNK) for i in range(count)]
        for i, entry in enumerate(entries):
            self._entries[(block.block_id, start + i * CHUNK)] = entry
        return run, entries

    def _begin(self, view: View, block: BlockInfo, start: int, ino: int, *, ahead: bool) -> tuple[_Entry, int]:
        """Lists the run starting at `start` and fetches it in the background: (its first
        entry, its number of chunks)."""
        assert self._nursery is not None
        run, entries = self._list(block, start, ino)
        self.counters.ahead += ahead
        self._nursery.start_soon(self._receive, view, block, start, run, entries)
        return entries[0], len(entries)

    async def _fetch(self, view: View, block: BlockInfo, start: int, ino: int) -> _Entry:
        """Lists the run starting at `start` and fetches it in this task (no nursery)."""
        run, entries = self._list(block, start, ino)
        await self._receive(view, block, start, run, entries, raise_error=True)
        return entries[0]

    async def _receive(self, view: View, block: BlockInfo, start: int, run: _Run, entries: list[_Entry],
                       raise_error: bool = False) -> None:
        count = len(entries)
        span = verifiable_range(block.length, block.checksum != 0, start, count * CHUNK)
        self.counters.runs += 1
        try:
            data = await self._fetch_fn(view, block, span.offset, span.length, run.buffer, span.minimum)
            run.received = len(data)
            self.counters.fetched_bytes += run.received
        except BaseException as exc:
            self._failed(block, start, run, entries, f"chunk run of block {block.block_id:x} at {start}: {exc!r}")
            if raise_error or not isinstance(exc, Exception):
                raise
            if not isinstance(exc, FastPathMiss):    # a bug: its reads still fall back, loudly
                log.warning("%s", run.error)
            return
        finally:
            run.done.set()
        if run.error is None and run.released:
            for i in range(count):
                key = (block.block_id, start + i * CHUNK)
                entry = self._entries.get(key)
                if entry is entries[i] and entry.waiters == 0:
                    self._drop(key, entry)

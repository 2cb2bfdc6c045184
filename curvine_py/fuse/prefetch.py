"""Runs of chunks fetched with one READ_BLOCK for the mount's trio reads from a TCP owner.

Why: a cold sequential read reaches the mount as 1 MiB requests (the kernel's largest FUSE read),
each of which cost one READ_BLOCK: a request frame, a worker round of Python and a reply head per
MiB. Measured on the cold fs:// path, the worker spent 0.35-0.55 ms of CPU per MiB that way, about
three times what it spends per byte on a 32 MiB KV get. Here the first read of a chunk fetches the
`chunks` chunks from it to the block's end with one request, verified as every read is
(dataplane.TrioBlockReader.read), and the kernel's next requests, already in flight behind it, find
their chunk fetched or being fetched. A request for a whole chunk is answered with a view of the
run's buffer (no copy; pyfuse3 copies it into the kernel before any other task runs).

Blocks are immutable, so a chunk kept by (block id, offset) is never stale; what a reader never
asks for is dropped oldest first once `budget` bytes are held. Only reads of whole chunks start a
run: small random reads keep fetching just what they need.

Resource handling: run buffers are recycled once every chunk of the run was taken or dropped and no
task waits on one (the same reply-then-reuse rule as readbuf.py); a run that fails wakes its waiters
with FastPathMiss and leaves nothing behind, so their reads go to the threaded client.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import trio

from curvine_py.client.buffers import aligned
from curvine_py.client.membership import View
from curvine_py.core import layout
from curvine_py.core.domain import BlockInfo
from curvine_py.core.rules import verifiable_range
from curvine_py.fuse.dataplane import FastPathMiss, TrioBlockReader

CHUNK = layout.CHUNK_SIZE


@dataclass(slots=True, eq=False)
class _Run:
    buffer: memoryview
    done: trio.Event = field(default_factory=trio.Event)
    error: str | None = None
    received: int = 0
    left: int = 0           # entries of this run still listed


@dataclass(slots=True, eq=False)
class _Entry:
    run: _Run
    at: int                 # this chunk's offset in the run's buffer
    waiters: int = 0


class ChunkRuns:
    def __init__(self, reader: TrioBlockReader, *, chunks: int = 4, budget: int = 64 * CHUNK) -> None:
        self._reader = reader
        self._chunks = chunks
        self._budget = budget
        self._entries: OrderedDict[tuple[int, int], _Entry] = OrderedDict()
        self._free: list[memoryview] = []
        self._returned: list[memoryview] = []
        self.runs = 0           # READ_BLOCKs sent for runs (tests, benchmark)

    def wanted(self, view: View, block: BlockInfo, length: int) -> bool:
        """Whether a read of `length` bytes of `block` goes through runs: whole-chunk reads from a
        worker on another node (a local owner's file is read by descriptor, with no request cost)."""
        return length >= CHUNK and not self._reader.serves_locally(view, block)

    async def chunk(self, view: View, block: BlockInfo, start: int) -> memoryview:
        """The verified stored bytes of the chunk at `start` (a multiple of CHUNK) of `block`.
        Use them before the next await, then call `taken` if the read took them all."""
        key = (block.block_id, start)
        entry = self._entries.get(key)
        if entry is None:
            entry = await self._fetch(view, block, start)
        elif not entry.run.done.is_set():
            entry.waiters += 1
            try:
                await entry.run.done.wait()
            finally:
                entry.waiters -= 1
        run = entry.run
        if run.error is not None:
            raise FastPathMiss(run.error)
        return run.buffer[entry.at:min(entry.at + CHUNK, run.received)]

    def taken(self, block: BlockInfo, start: int) -> None:
        entry = self._entries.pop((block.block_id, start), None)
        if entry is not None:
            self._release(entry.run)

    def _release(self, run: _Run) -> None:
        run.left -= 1
        if run.left == 0 and run.error is None:
            self._returned.append(run.buffer)       # reused after this reply went out

    def _buffer(self) -> memoryview:
        if self._returned:
            self._free.extend(self._returned)
            self._returned.clear()
        return self._free.pop() if self._free else aligned(self._chunks * CHUNK)

    def _make_room(self, wanted: int) -> int:
        """Drops fetched, unwaited chunks, oldest first, until `wanted` chunks fit the budget;
        returns how many fit (at least 1: the read itself always runs)."""
        limit = self._budget // CHUNK
        for key in list(self._entries):
            if len(self._entries) + wanted <= limit:
                break
            entry = self._entries[key]
            if entry.run.done.is_set() and entry.waiters == 0:
                del self._entries[key]
                self._release(entry.run)
        return max(1, min(wanted, limit - len(self._entries)))

    async def _fetch(self, view: View, block: BlockInfo, start: int) -> _Entry:
        count = 0
        while (count < self._chunks and start + count * CHUNK < block.length
               and (block.block_id, start + count * CHUNK) not in self._entries):
            count += 1
        count = self._make_room(max(count, 1))
        run = _Run(self._buffer(), left=count)
        entries = [_Entry(run, i * CHUNK) for i in range(count)]
        for i, entry in enumerate(entries):
            self._entries[(block.block_id, start + i * CHUNK)] = entry
        span = verifiable_range(block.length, block.checksum != 0, start, count * CHUNK)
        self.runs += 1
        try:
            data = await self._reader.read(view, block, span.offset, span.length, run.buffer, span.minimum)
            run.received = len(data)
        except BaseException as exc:
            run.error = f"chunk run of block {block.block_id:x} at {start}: {exc}"
            for i in range(count):      # nothing of a failed run stays listed
                key = (block.block_id, start + i * CHUNK)
                if self._entries.get(key) is entries[i]:
                    del self._entries[key]
            raise
        finally:
            run.done.set()
        return entries[0]

"""Sequential read-ahead of one open file: verified chunks fetched in the background ahead of a
sequential reader, kept by block id until read or dropped."""
from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from concurrent.futures import Future

from curvine_py.client.blockio import BlockStore
from curvine_py.client.buffers import aligned, zero
from curvine_py.core import layout
from curvine_py.core.domain import BlockInfo

READ_AHEAD_WAIT_S = 30.0     # bounded by the data timeout of the fetch itself; a safety net only


class ReadAhead:
    """Sequential read-ahead of one open file: once reads follow each other, the next `window`
    bytes are fetched in the background, one verified chunk (1 MiB) per fetch, so the worker's
    latency overlaps with the reader's (FUSE) work. Chunks are keyed by block id: blocks are
    immutable, so a fetched chunk can never be stale, only unused (a commit gives the block a new
    id).

    Resource handling: each chunk is received into a page-aligned buffer recycled through `free`
    (a fresh mmap per chunk costs 256 page faults). Chunks and buffers change hands only under the
    file's lock: a reader copies out under the lock after checking its chunk is still listed, so a
    buffer is never recycled while it is read; a buffer whose fetch is still running when its chunk
    is dropped is left to that fetch (and the garbage collector)."""

    def __init__(self, window: int, store: BlockStore, lock: threading.RLock) -> None:
        self.window = window
        self._store = store
        self._lock = lock                       # the file's lock
        self.next_offset = -1                   # where a sequential reader reads next
        self.chunks: dict[tuple[int, int], Future[memoryview]] = {}   # (block id, chunk start)
        self.buffers: dict[tuple[int, int], memoryview] = {}
        self.free: list[memoryview] = []

    def buffer(self) -> memoryview:
        return self.free.pop() if self.free else aligned(layout.CHUNK_SIZE)

    def forget_before(self, keep: set[tuple[int, int]]) -> None:
        for key in [k for k in self.chunks if k not in keep]:
            future = self.chunks.pop(key)
            buffer = self.buffers.pop(key)
            if future.done() or future.cancel():
                self.free.append(buffer)

    def plan(self, blocks: dict[int, BlockInfo], block_size: int, size: int, offset: int, length: int,
             in_memory: Callable[[int, BlockInfo], bool]) -> None:
        """Under the lock: when this read continues the previous one, make sure the chunks of the
        next `window` bytes are being fetched (none of a block `in_memory` says this handle holds)."""
        sequential = offset == self.next_offset or offset == 0
        self.next_offset = offset + length
        if not sequential or length == 0:
            self.forget_before(set())
            return
        chunk = layout.CHUNK_SIZE
        wanted: set[tuple[int, int]] = set()
        first_index, first_inner = divmod(offset, block_size)
        position = first_index * block_size + first_inner - first_inner % chunk
        end = min(size, offset + length + self.window)
        while position < end:
            index, inner = divmod(position, block_size)
            block = blocks.get(index)
            start = inner - inner % chunk
            if block is not None and start < block.length and not in_memory(index, block):
                key = (block.block_id, start)
                wanted.add(key)
                if key not in self.chunks and position >= offset + length:
                    buffer = self.buffers[key] = self.buffer()
                    self.chunks[key] = self._store.prefetch(
                        functools.partial(self._store.read_chunk, block, start, buffer))
            position = index * block_size + min(start + chunk, block_size)
        self.forget_before(wanted)

    def copy(self, block: BlockInfo | None, inner: int, target: memoryview) -> bool:
        """Copies from a read-ahead chunk when one covers this piece (waiting for its fetch); False
        to read it now. Call without the lock."""
        if block is None:
            return False
        chunk = layout.CHUNK_SIZE
        start = inner - inner % chunk
        if inner + len(target) > start + chunk:
            return False
        key = (block.block_id, start)
        future = self.chunks.get(key)
        if future is None:
            return False
        try:
            data = future.result(timeout=READ_AHEAD_WAIT_S)
        except Exception:   # noqa: BLE001 - cancelled or failed: read it the normal way
            return False
        end = inner + len(target)
        stored_end = min(end, block.length)          # past the block's end: zeros
        if stored_end > start + len(data):
            return False                              # a short chunk: never used
        available = max(0, stored_end - inner)
        with self._lock:                              # the buffer is not recycled meanwhile
            if self.chunks.get(key) is not future:
                return False
            target[:available] = data[inner - start:inner - start + available]
        zero(target[available:])
        return True

    def ready(self, block: BlockInfo | None, inner: int, length: int) -> memoryview | None:
        """A chunk that is already here and covers [inner, inner+length) of `block` (call under
        the lock); None otherwise."""
        if block is None:
            return None
        start = inner - inner % layout.CHUNK_SIZE
        if inner + length > start + layout.CHUNK_SIZE:
            return None
        future = self.chunks.get((block.block_id, start))
        if future is None or not future.done() or future.cancelled() or future.exception() is not None:
            return None
        data = future.result()
        if min(inner + length, block.length) > start + len(data):
            return None
        return data

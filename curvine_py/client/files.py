"""Files: blocks on workers, metadata on the master, close-to-open consistency.

A `CurvineFile` keeps the file's block map (from GetBlocks at open) and a set of dirty blocks in
memory. Writes land in dirty block buffers; `flush()` writes each dirty block as a NEW block
(copy-on-write: a reader that opened earlier keeps reading the old blocks) to its workers, then
commits size and block map to the master in one call. Other clients see the new content at their
next open (close-to-open, as Curvine/HDFS). Missing blocks and bytes beyond a block's stored length
read as zeros, so holes and truncate-extend cost nothing.

Concurrency: the positional API (pread_into, pwrite, truncate, setattr, commit, refresh) may be
called from several threads: state changes happen under one lock, and reads of stored blocks are
done outside it (stored blocks are immutable, copy-on-write), so parallel reads of one file overlap.
The stream API (read/write/seek) keeps one position and is for one thread.
"""
from __future__ import annotations

import io
import os
import threading
from collections.abc import Callable
from dataclasses import replace

from curvine_py.client.blockio import BlockStore
from curvine_py.client.buffers import zero
from curvine_py.client.readahead import ReadAhead
from curvine_py.client.writeback import WriteBack
from curvine_py.core import layout
from curvine_py.core.domain import Attr, BlockInfo, FileBlocks
from curvine_py.core.errors import CurvineError, InvalidArgument
from curvine_py.core.posix import SetAttrChanges
from curvine_py.core.rules import truncate_map

__all__ = ["DEFAULT_BLOCK_SIZE", "BlockStore", "CurvineFile"]   # BlockStore: where callers import it from

DEFAULT_BLOCK_SIZE = 64 << 20


class CurvineFile(io.RawIOBase):
    """An open regular file. Positional API (pread/pwrite) for FUSE, stream API for everyone."""

    def __init__(self, store: BlockStore, attr: Attr, *, node: str, writable: bool,
                 append: bool = False, on_close: Callable[[], None] | None = None,
                 blocks: FileBlocks | None = None, read_ahead: int = 0,
                 write_behind: bool = False) -> None:
        """`blocks`: the block map when the caller already has it (a file it just created is
        empty: no GetBlocks round trip); fetched from the master otherwise. `read_ahead`: bytes
        to fetch ahead of a sequential reader (0: off). `write_behind`: a block that fills up is
        sent in the background while the next one fills (at most two blocks in memory); its
        errors surface at the next write of that block or at commit, as write-back errors do."""
        super().__init__()
        self._store = store
        self.ino = attr.ino
        self._writable = writable
        self._append = append
        self._on_close = on_close
        self._lock = threading.RLock()
        self._ahead = ReadAhead(read_ahead, store, self._lock) if read_ahead > 0 else None
        self._position = 0
        self._blocks: dict[int, BlockInfo] = {}   # shared with the write-back, reloaded in place
        reply = blocks if blocks is not None else store.master.get_blocks(attr.ino)
        self._wb = WriteBack(store, attr.ino, node, self._blocks, _block_size(reply), reply.attr.size,
                             write_behind=write_behind)
        self._reload(reply)

    def _reload(self, reply: FileBlocks) -> None:
        self.attr = reply.attr   # attributes as of open/refresh (mode, owner; size may move on)
        self.size = self._wb.committed_size = reply.attr.size
        self.block_size = self._wb.block_size = _block_size(reply)
        self._blocks.clear()
        self._blocks.update((b.index, b) for b in reply.blocks)
        self._wb.forget_stale()   # keep only what still is the file's content

    @property
    def dirty(self) -> bool:
        """True while this handle holds writes (or a size change) not yet committed."""
        return self._wb.pending

    def refresh(self) -> bool:
        """Close-to-open for a handle kept open: re-fetches size and block map from the master
        unless this handle has uncommitted writes (which must not be lost). Returns True if
        reloaded."""
        with self._lock:
            if self.dirty:
                return False
            self._reload(self._store.master.get_blocks(self.ino))
            return True

    # -- io.RawIOBase ------------------------------------------------------------------------
    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return self._writable

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._position, os.SEEK_END: self.size}[whence]
        if base + offset < 0:
            raise InvalidArgument("negative seek position")
        self._position = base + offset
        return self._position

    def tell(self) -> int:
        return self._position

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        n = self.pread_into(self._position, memoryview(buffer).cast("B"))
        self._position += n
        return n

    def readall(self) -> bytes:
        """The rest of the file in one positional read. Why not io.RawIOBase's default: it reads
        8 KiB at a time, one block request per call, and a verified read fetches its whole 1 MiB
        chunk, so `f.read()` of a 1 MiB file moved 128 MiB (about 100 times slower than read(n))."""
        data = self.pread(self._position, max(0, self.size - self._position))
        self._position += len(data)
        return data

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        if self._append:
            self._position = self.size
        n = self.pwrite(self._position, data)
        self._position += n
        return n

    def flush(self) -> None:
        if not self.closed:
            self.commit()

    def close(self) -> None:
        if self.closed:
            return
        try:
            self.commit()
        finally:
            super().close()
            self._wb.release()
            if self._ahead is not None:
                self._ahead.forget_before(set())
            if self._on_close:
                self._on_close()

    # -- positional API ----------------------------------------------------------------------
    def pread(self, offset: int, size: int) -> bytes:
        buffer = bytearray(max(0, min(size, self.size - offset)))
        n = self.pread_into(offset, memoryview(buffer))
        return bytes(buffer[:n])

    def pread_into(self, offset: int, out: memoryview) -> int:
        # Plan under the lock (dirty data is copied right away), fetch stored blocks outside it.
        stored: list[tuple[BlockInfo | None, int, memoryview]] = []
        with self._lock:
            length = max(0, min(len(out), self.size - offset))
            for extent in layout.extents(offset, length, self.block_size):
                target = out[extent.buffer_offset:extent.buffer_offset + extent.length]
                dirty = self._wb.dirty.get(extent.index)
                block = self._blocks.get(extent.index)
                if dirty is not None:
                    target[:] = dirty.buffer[extent.block_offset:extent.block_offset + len(target)]
                elif not self._wb.copy_clean(block, extent.block_offset, target):
                    stored.append((block, extent.block_offset, target))
            self._plan_ahead(offset, length)
        for block, inner, target in stored:
            if self._ahead is None or not self._ahead.copy(block, inner, target):
                self._store.read_into(block, inner, target)
        return length

    def _plan_ahead(self, offset: int, length: int) -> None:
        if self._ahead is not None:
            self._ahead.plan(self._blocks, self.block_size, self.size, offset, length,
                             lambda index, block: index in self._wb.dirty or self._wb.in_clean(block))

    def _fetched(self, index: int, inner: int, length: int) -> memoryview | None:
        """A read-ahead chunk already here covering [inner, inner+length) of block `index`."""
        return self._ahead.ready(self._blocks.get(index), inner, length) if self._ahead is not None else None

    def _read_extent(self, index: int, inner: int, target: memoryview) -> None:
        dirty = self._wb.dirty.get(index)
        if dirty is not None:
            target[:] = dirty.buffer[inner:inner + len(target)]
            return
        block = self._blocks.get(index)
        if not self._wb.copy_clean(block, inner, target):
            self._store.read_into(block, inner, target)

    def pwrite(self, offset: int, data: bytes | bytearray | memoryview) -> int:
        if not self._writable:
            raise InvalidArgument("file not open for writing")
        source = memoryview(data).cast("B")
        with self._lock:
            self._wb.raise_if_failed()
            self._pwrite_locked(offset, source)
            self._wb.write_full_blocks()
            return len(source)

    def _pwrite_locked(self, offset: int, source: memoryview) -> None:
        for extent in layout.extents(offset, len(source), self.block_size):
            dirty = self._wb.dirty_block(extent.index, self.size)
            end = extent.block_offset + extent.length
            dirty.buffer[extent.block_offset:end] = source[extent.buffer_offset:extent.buffer_offset
                                                           + extent.length]
            dirty.length = max(dirty.length, end)
        if offset + len(source) > self.size:
            self.size = offset + len(source)
            self._wb.size_dirty = True

    # -- without blocking (callers on an event loop: FUSE) -----------------------------------
    def try_close(self) -> bool:
        """close() when there is nothing to commit and no other thread holds the file; False
        (and still open) otherwise, for the caller to close it from a thread."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            if self.dirty:
                return False
            self.close()
            return True
        finally:
            self._lock.release()

    def try_pread_into(self, offset: int, out: memoryview) -> int | None:
        """pread_into when every byte is in memory (uncommitted writes, blocks this handle
        committed, read-ahead chunks already fetched, holes, past the end); None when a worker
        would have to be asked, or another thread holds the file. Never blocks: lets an event loop
        skip a thread hop."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            length = max(0, min(len(out), self.size - offset))
            pieces = list(layout.extents(offset, length, self.block_size))
            fetched: dict[int, memoryview] = {}
            for number, extent in enumerate(pieces):
                if self._in_memory(extent.index):
                    continue
                data = self._fetched(extent.index, extent.block_offset, extent.length)
                if data is None:
                    return None
                fetched[number] = data
            for number, extent in enumerate(pieces):
                target = out[extent.buffer_offset:extent.buffer_offset + extent.length]
                data = fetched.get(number)
                if data is None:
                    self._read_extent(extent.index, extent.block_offset, target)
                    continue
                block = self._blocks[extent.index]
                start = extent.block_offset - extent.block_offset % layout.CHUNK_SIZE
                available = max(0, min(extent.block_offset + extent.length, block.length) - extent.block_offset)
                target[:available] = data[extent.block_offset - start:extent.block_offset - start + available]
                zero(target[available:])
            self._plan_ahead(offset, length)
            return length
        finally:
            self._lock.release()

    def try_plan_read(self, offset: int, out: memoryview) -> tuple[int, list[tuple[BlockInfo, int, memoryview]]] | None:
        """For callers that fetch stored blocks themselves (the FUSE mount, on trio sockets):
        copies what is in memory into `out`, zero-fills holes, and returns (length, pieces), each
        piece (block, offset in the block, target view) still to be read from a worker. None if
        another thread holds the file. Never blocks."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            length = max(0, min(len(out), self.size - offset))
            pieces: list[tuple[BlockInfo, int, memoryview]] = []
            for extent in layout.extents(offset, length, self.block_size):
                target = out[extent.buffer_offset:extent.buffer_offset + extent.length]
                if self._in_memory(extent.index):
                    self._read_extent(extent.index, extent.block_offset, target)
                    continue
                data = self._fetched(extent.index, extent.block_offset, extent.length)
                block = self._blocks[extent.index]
                stored = min(len(target), max(0, block.length - extent.block_offset))
                zero(target[stored:])
                if data is not None:
                    start = extent.block_offset - extent.block_offset % layout.CHUNK_SIZE
                    target[:stored] = data[extent.block_offset - start:extent.block_offset - start + stored]
                elif stored:
                    pieces.append((block, extent.block_offset, target[:stored]))
            self._plan_ahead(offset, length)
            return length, pieces
        finally:
            self._lock.release()

    def try_pwrite(self, offset: int, data: bytes | bytearray | memoryview) -> int | None:
        """pwrite when it needs no worker: every touched block is already dirty, kept in memory
        or new, and none becomes full (a full block is sent at once). None otherwise."""
        if not self._writable or not self._lock.acquire(blocking=False):
            return None
        try:
            if self._wb.failed is not None:
                return None      # the blocking path raises it
            source = memoryview(data).cast("B")
            for extent in layout.extents(offset, len(source), self.block_size):
                dirty = self._wb.dirty.get(extent.index)
                if dirty is not None and dirty.upload is not None:
                    return None
                if dirty is None and not self._in_memory(extent.index):
                    return None
                high = max(dirty.length if dirty else 0, extent.block_offset + extent.length)
                if high == self.block_size:
                    return None
            self._pwrite_locked(offset, source)
            return len(source)
        finally:
            self._lock.release()

    def _in_memory(self, index: int) -> bool:
        if index in self._wb.dirty:
            return True
        block = self._blocks.get(index)
        if block is None or block.length == 0:
            return True      # a hole (or past the end): zeros
        return self._wb.in_clean(block)

    def truncate(self, size: int | None = None) -> int:
        """Sets the length; sparse (no bytes are allocated for an extension)."""
        new_size = self._position if size is None else size
        if new_size < 0:
            raise InvalidArgument("negative size")
        self.setattr(SetAttrChanges(size=new_size))
        return new_size

    def setattr(self, changes: SetAttrChanges) -> Attr:
        """SetAttr through this handle (FUSE: ftruncate/chmod/utimens of an open file). A size
        change first commits this handle's writes, then reloads the block map, so the handle and
        the master agree on what the file holds."""
        with self._lock:
            if changes.size is not None:
                self.commit()
            attr = self._store.master.setattr(self.ino, changes)
            if changes.size is not None:
                self._truncated(attr)
            return attr

    def _truncated(self, attr: Attr) -> None:
        """The block map after a committed truncate, derived locally as the master derives it
        (blocks past the end dropped, a straddling block shortened): no GetBlocks round trip."""
        self.attr = attr
        self.size = attr.size
        plan = truncate_map(attr.size, self.block_size)
        for index, block in list(self._blocks.items()):
            length = plan.length_after(index, block.length)
            if length is None:
                del self._blocks[index]
                self._wb.drop_clean(index)
            elif length != block.length:
                self._blocks[index] = replace(block, length=length, checksum=0)   # no longer the stored file's

    def commit(self) -> None:
        """Writes dirty blocks and publishes size + block map at the master (close/fsync)."""
        with self._lock:
            attr = self._wb.commit(self.size)
            if attr is not None:
                self.size = attr.size
                self.attr = attr

    @property
    def failed(self) -> CurvineError | None:
        """The sticky write error of this handle, if a block write failed."""
        return self._wb.failed


def _block_size(reply: FileBlocks) -> int:
    return reply.attr.block_size or reply.policy.block_size or DEFAULT_BLOCK_SIZE

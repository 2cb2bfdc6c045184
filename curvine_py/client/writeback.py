"""Write-back of one open file: dirty blocks in memory, write-behind of full blocks, blocks this
handle committed kept for re-reads and rewrites, the commit, and the sticky failure of a handle
whose block write failed.

Every method is called under the file's lock. The block map (`blocks`) is the file's own dict,
shared: the file reloads it in place, this class replaces the entries it writes.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from concurrent.futures import Future

from curvine_py.client.blockio import BlockStore
from curvine_py.client.buffers import zero
from curvine_py.core.domain import Attr, BlockId, BlockInfo, InodeId
from curvine_py.core.errors import CurvineError

MAX_CLEAN_BYTES = 32 << 20   # per open file: written blocks kept for re-reads and rewrites


class DirtyBlock:
    __slots__ = ("buffer", "length", "upload")

    def __init__(self, buffer: memoryview, length: int) -> None:
        self.buffer = buffer      # block_size bytes, page-aligned
        self.length = length      # bytes of the block that are meaningful (high-water mark)
        self.upload: Future[BlockInfo] | None = None   # write-behind in flight: buffer is frozen


class CleanBlock:
    """A block this handle committed itself, kept in memory: its bytes equal the stored block's,
    so reads and the next copy-on-write take them from here instead of from a worker."""
    __slots__ = ("block_id", "buffer", "length")

    def __init__(self, block_id: BlockId, buffer: memoryview, length: int) -> None:
        self.block_id = block_id
        self.buffer = buffer      # block_size bytes; zero beyond `length`
        self.length = length


class WriteBack:
    def __init__(self, store: BlockStore, ino: InodeId, node: str, blocks: dict[int, BlockInfo],
                 block_size: int, committed_size: int, *, write_behind: bool) -> None:
        self._store = store
        self._ino = ino
        self._node = node
        self.blocks = blocks
        self.block_size = block_size
        self.committed_size = committed_size
        self._write_behind = write_behind
        self.dirty: dict[int, DirtyBlock] = {}
        self.clean: dict[int, CleanBlock] = {}
        self.size_dirty = False
        self.uncommitted: list[BlockInfo] = []   # written to workers, not yet committed
        # The first failed block write: sticky, like a write-back error. Once set, no write of
        # this handle is published (the file keeps what its last commit published), and every
        # later write, commit and close raises it.
        self.failed: CurvineError | None = None

    @property
    def pending(self) -> bool:
        """True while this handle holds writes (or a size change) not yet committed."""
        return bool(self.dirty or self.size_dirty or self.uncommitted)

    def release(self) -> None:
        """At close: every buffer goes back to the store (an upload still running keeps its own)."""
        for dirty in self.dirty.values():
            if dirty.upload is None or dirty.upload.done():
                self._store.recycle(dirty.buffer, dirty.length)
        self.dirty.clear()
        for index in list(self.clean):
            self.drop_clean(index)

    def in_clean(self, block: BlockInfo) -> bool:
        clean = self.clean.get(block.index)
        return clean is not None and clean.block_id == block.block_id

    def copy_clean(self, block: BlockInfo | None, inner: int, target: memoryview) -> bool:
        """Copies from a kept committed block; False if there is none."""
        clean = self.clean.get(block.index) if block is not None else None
        if clean is None or block is None or clean.block_id != block.block_id:
            return False
        stored = min(len(target), max(0, block.length - inner))
        target[:stored] = clean.buffer[inner:inner + stored]
        zero(target[stored:])
        return True

    def write_full_blocks(self) -> None:
        """Sends completely written blocks right away (a 1 GiB sequential write holds one block
        in memory, not the whole file, two with write-behind); they become visible to others
        only at commit."""
        for index in [i for i, d in self.dirty.items() if d.length == self.block_size and d.upload is None]:
            if not self._write_behind:
                dirty = self.dirty[index]
                block = self.guarded(functools.partial(self._store.write, self._ino, index, dirty.buffer,
                                                       self._node))
                del self.dirty[index]
                self.blocks[index] = block
                self.uncommitted.append(block)
                self.keep(index, block, dirty)
                continue
            in_flight = sorted(i for i, d in self.dirty.items() if d.upload is not None)
            for other in in_flight[:max(0, len(in_flight) - 1)]:   # keep at most one other in flight
                self.finish_upload(other)
            dirty = self.dirty[index]
            dirty.upload = self._store.upload(self._ino, index, dirty.buffer, self._node)

    def finish_upload(self, index: int) -> None:
        """Waits for a write-behind upload; the block becomes uncommitted like a synchronously
        written one. On failure the handle is failed (`guarded`)."""
        dirty = self.dirty[index]
        future, dirty.upload = dirty.upload, None
        if future is None:
            return
        block = self.guarded(future.result)
        del self.dirty[index]
        self.blocks[index] = block
        self.uncommitted.append(block)
        self.keep(index, block, dirty)

    def finish_uploads(self) -> None:
        for index in sorted(i for i, d in self.dirty.items() if d.upload is not None):
            self.finish_upload(index)

    def dirty_block(self, index: int, size: int) -> DirtyBlock:
        """The dirty buffer of block `index` of a file of `size` bytes, made on first use from
        the block's current content (copy-on-write)."""
        dirty = self.dirty.get(index)
        if dirty is not None and dirty.upload is not None:
            self.finish_upload(index)     # its buffer is frozen while it is sent
            dirty = None
        if dirty is None:
            block = self.blocks.get(index)
            clean = self.clean.pop(index, None)
            if clean is not None and block is not None and clean.block_id == block.block_id:
                # copy-on-write from memory: the kept buffer becomes the dirty one
                length = max(0, min(block.length, size - index * self.block_size))
                zero(clean.buffer[length:clean.length])
                dirty = self.dirty[index] = DirtyBlock(clean.buffer, length)
                return dirty
            buffer = self._store.block_buffer(self.block_size)
            length = 0
            if block is not None and block.length:
                # copy-on-write: the new block starts as the old one's content
                length = min(block.length, size - index * self.block_size)
                if length > 0:
                    self._store.read_into(block, 0, buffer[:length])
            dirty = self.dirty[index] = DirtyBlock(buffer, max(0, length))
        return dirty

    def keep_clean(self, latest: dict[int, BlockInfo]) -> None:
        """After a commit, the dirty buffers hold exactly the new blocks: keep some of them."""
        for index, dirty in self.dirty.items():
            block = latest.get(index)
            if block is not None:
                self.keep(index, block, dirty)
            else:
                self._store.recycle(dirty.buffer, dirty.length)

    def keep(self, index: int, block: BlockInfo, dirty: DirtyBlock) -> None:
        """Keeps a just-written block's buffer (oldest dropped first past MAX_CLEAN_BYTES; a
        sequential writer of big blocks keeps nothing, its buffers go back to the store)."""
        if block.length > MAX_CLEAN_BYTES:
            self._store.recycle(dirty.buffer, dirty.length)
            return
        zero(dirty.buffer[block.length:dirty.length])   # bytes past the committed end read as zeros
        self.drop_clean(index)
        self.clean[index] = CleanBlock(block.block_id, dirty.buffer, block.length)
        while sum(c.length for c in self.clean.values()) > MAX_CLEAN_BYTES:
            self.drop_clean(next(iter(self.clean)))

    def drop_clean(self, index: int) -> None:
        clean = self.clean.pop(index, None)
        if clean is not None:
            self._store.recycle(clean.buffer, clean.length)

    def forget_stale(self) -> None:
        """After the block map was reloaded: keep only the clean blocks that still are the file's."""
        for index, clean in list(self.clean.items()):
            block = self.blocks.get(index)
            if block is None or block.block_id != clean.block_id:
                self.drop_clean(index)

    def commit(self, size: int) -> Attr | None:
        """Writes dirty blocks and publishes size + block map at the master; the new attributes,
        or None when there was nothing to commit."""
        self.raise_if_failed()
        if not self.pending:
            return None
        self.finish_uploads()
        latest = {block.index: block for block in self.uncommitted}  # a rewrite replaces
        for index in sorted(self.dirty):
            dirty = self.dirty[index]
            length = min(dirty.length, max(0, size - index * self.block_size))
            latest[index] = self.guarded(
                functools.partial(self._store.write, self._ino, index, dirty.buffer[:length], self._node))
        written = [latest[index] for index in sorted(latest)]
        published = {block.block_id for block in written}
        superseded = [b.block_id for b in self.uncommitted if b.block_id not in published]
        attr = self._store.master.commit(self._ino, size, written)
        self._store.abandon(self._ino, superseded)   # rewritten before this commit: never published
        for block in written:
            self.blocks[block.index] = block
        self.keep_clean(latest)
        self.dirty.clear()
        self.uncommitted.clear()
        self.size_dirty = False
        self.committed_size = attr.size
        return attr

    def guarded(self, write: Callable[[], BlockInfo]) -> BlockInfo:
        """Runs one block write; a failure fails the whole handle. Why not retry or commit around
        the hole: a committed size must never cover a block that was not stored, and publishing
        the blocks before the failed one would give a file that reads as something it never was
        (half new, half old or zeros)."""
        try:
            return write()
        except Exception as exc:   # a bug fails the handle too, never a silent hole
            failed = self.fail(exc if isinstance(exc, CurvineError) else CurvineError(f"block write failed: {exc!r}"))
            raise failed from exc

    def fail(self, cause: CurvineError) -> CurvineError:
        if self.failed is None:
            self.failed = type(cause)(
                f"{cause.message}; nothing written through this handle since its last commit is "
                f"published (the file keeps its {self.committed_size} committed bytes)", errno=cause.errno)
            self._store.abandon(self._ino, [b.block_id for b in self.uncommitted])   # never published
            self.uncommitted.clear()
        return self.failed

    def raise_if_failed(self) -> None:
        if self.failed is not None:
            raise type(self.failed)(self.failed.message, errno=self.failed.errno)

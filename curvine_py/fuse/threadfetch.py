"""Chunk runs fetched in worker threads, for fuse/prefetch.py.

Why (issue 14): on the trio thread a cold read's receive (tcp_recvmsg copies), its verification
(xxh3 per chunk) and the request itself took about a third of that thread's time; the rest is the
reply into the kernel, which pyfuse3 makes on that thread holding the GIL. In a thread, the receive
(recv_into into the run's page-aligned buffer) and the hashing release the GIL, so that work runs
beside the replies instead of between them.

How a run is read: from a TCP owner by fuse/blockrecv.py (one recv per chunk, each verified as it
lands); from an owner on this node, over TLS, or after any trouble there, by the client's own read
(client/blockio.BlockStore.read, the threaded fallback's read: the replicas in turn, recent
failures last, each try bounded by the block deadline, a local owner read by descriptor, every
chunk verified, a bad copy reported). A CurvineError from it becomes FastPathMiss, so the waiting
reads go to the threaded client, which raises the right error (EIO) or finds a copy.

Resource handling: trio.to_thread.run_sync is not abandoned on cancellation (the task waits for
its thread), so a run's buffer is never reused while a thread may still write into it; the
CapacityLimiter bounds the threads (and so the connections per worker) this mount's runs use.
"""
from __future__ import annotations

import logging
from collections.abc import Callable

import trio

from curvine_py.client.blockio import BlockStore
from curvine_py.client.membership import View, WorkerAddress
from curvine_py.core.domain import BlockInfo
from curvine_py.core.errors import CurvineError
from curvine_py.fuse.blockrecv import BlockReceiver
from curvine_py.fuse.dataplane import FastPathMiss
from curvine_py.fuse.localfds import LocalFds, LocalMiss

log = logging.getLogger(__name__)

THREADS = 2     # runs received at once per mount (config fuse_fetch_threads): 4 measured no better on 2 cores


class ThreadedFetch:
    def __init__(self, store: BlockStore, receiver: BlockReceiver | None, *, threads: int = THREADS,
                 is_local: Callable[[WorkerAddress], bool] = lambda _worker: False,
                 local: LocalFds | None = None) -> None:
        """`receiver`: None to read every TCP run through the client (TLS). `local`: the mount's
        descriptors of blocks stored on this node (None: those go through the client too)."""
        self._store = store
        self._receiver = receiver
        self._is_local = is_local
        self._local = local
        self.limiter = trio.CapacityLimiter(threads)

    async def read(self, view: View, block: BlockInfo, offset: int, length: int, out: memoryview,
                   minimum: int) -> memoryview:
        """Verified bytes [offset, offset+length) of `block` into `out` (at least `minimum`), read
        in a thread. FastPathMiss when no copy could be read."""
        here = self._here(view, block)
        if here is not None and self._local is not None:
            try:
                return await self._local.read(here.unix_socket, block, offset, length, out, minimum,
                                              limiter=self.limiter)
            except LocalMiss as exc:
                log.info("block %x on this node: %s; reading it through the client", block.block_id, exc)
        try:
            data: memoryview = await trio.to_thread.run_sync(self._read, view, block, offset, length,
                                                             out[:length], minimum, limiter=self.limiter)
        except CurvineError as exc:
            raise FastPathMiss(f"block {block.block_id:x} in a thread: {exc}") from None
        return data

    def _read(self, view: View, block: BlockInfo, offset: int, length: int, out: memoryview,
              minimum: int) -> memoryview:
        worker = self._tcp_owner(view, block)
        if worker is not None and self._receiver is not None:
            try:
                return self._receiver.read(worker, block, offset, length, out, minimum)
            except FastPathMiss as exc:
                log.info("block %x: %s; reading it through the client", block.block_id, exc)
        return self._store.read(block, offset, length, out, minimum)

    def _here(self, view: View, block: BlockInfo) -> WorkerAddress | None:
        """A live holder of the block that runs on this node, if any."""
        return next((view.workers[w] for w in block.worker_ids
                     if w in view.workers and self._is_local(view.workers[w])), None)

    def _tcp_owner(self, view: View, block: BlockInfo) -> WorkerAddress | None:
        """The worker the receiver asks: the first live holder, recent failures last; None when a
        holder runs on this node (the client reads it by descriptor)."""
        live = [view.workers[w] for w in block.worker_ids if w in view.workers]
        if not live or any(self._is_local(w) for w in live):
            return None
        ordered = self._store.suspects.order([w.worker_id for w in live], str)
        return view.workers[ordered[0]]

    def close(self) -> None:
        if self._receiver is not None:
            self._receiver.close()

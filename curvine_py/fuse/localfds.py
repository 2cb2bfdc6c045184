"""Short-circuit reads in the mount's trio thread, for blocks whose owner worker runs on this node.

Why: the threaded client already reads a local owner's stored file through a descriptor the worker
passes over its unix socket (client/shortcircuit.py), but from the mount every such read is a
thread hop (two GIL hand-offs and a wake-up per FUSE request, while pyfuse3 copies replies into
the kernel holding the GIL on the trio thread). Here the worker is asked once per block, for the
whole block: its stored file's descriptor (SCM_RIGHTS), where the block starts in it, and the
digest of every 1 MiB chunk. Each FUSE read then `preadv`s the chunks it needs straight into the
reply buffer, in the trio thread, and checks each against its digest.

Blocks are immutable (a commit gives new data a new block id), so a descriptor kept by block id
never reads another version; a worker that evicts the block only unlinks the file, and the open
descriptor still reads the same bytes. What the descriptor reads is verified chunk by chunk like
every other read: a bad local copy (a flipped bit on disk) fails the digest, the descriptor is
dropped and the caller gets `LocalMiss` and falls back to the threaded client, which reads it again,
reports the bad copy and tries the replicas (never wrong bytes).

The page cache normally holds a freshly written block; a read that would wait for the disk
(`RWF_NOWAIT` says EAGAIN) finishes in a thread instead of stalling the event loop.

Resource handling: a descriptor in use by a read is closed only after that read (use counts); at
most `keep` are held, least recently used first out; the unix connection is serialised by a lock
(a request is microseconds of worker work) and closed after any error.
"""
from __future__ import annotations

import array
import itertools
import os
import socket
from collections import OrderedDict
from dataclasses import dataclass

import trio

from curvine_py.client.shortcircuit import FdReply
from curvine_py.core import frames, layout
from curvine_py.core.domain import BlockInfo
from curvine_py.core.errors import CurvineError
from curvine_py.core.rules import verifiable_range
from curvine_py.proto.curvine.v1.data_pb2 import DataHeader

CHUNK = layout.CHUNK_SIZE
_MAX_REPLY = frames.PREFIX_SIZE + frames.MAX_HEADER
_FD_SPACE = socket.CMSG_SPACE(array.array("i").itemsize)


class LocalMiss(Exception):
    """This read is better served by the threaded client (bad copy, worker gone, protocol trouble)."""


@dataclass(slots=True)
class LocalBlock:
    fd: int
    data_offset: int        # where the block's byte 0 is in the stored file
    length: int             # stored bytes the worker answered for
    digests: list[int]      # one per chunk of [0, length)
    users: int = 0
    dropped: bool = False   # out of the cache: closed when its last user is done

    def release(self) -> None:
        self.users -= 1
        if self.dropped and self.users == 0:
            os.close(self.fd)


class _UnixConnection:
    def __init__(self, sock: trio.socket.SocketType) -> None:
        self.sock = sock
        self.lock = trio.Lock()
        self.ids = itertools.count(1)

    async def exchange(self, op: frames.Op, header: DataHeader) -> tuple[DataHeader, int | None]:
        request_id = next(self.ids) & frames.MAX_REQUEST_ID
        data = memoryview(frames.encode(op, request_id, header))
        while data:
            data = data[await self.sock.send(data):]
        assembly = FdReply(op, request_id)
        try:
            while not assembly.complete:
                got, ancillary, _flags, _addr = await self.sock.recvmsg(_MAX_REPLY, _FD_SPACE)
                fds: list[int] = []
                for level, kind, payload in ancillary:
                    if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                        numbers = array.array("i")
                        numbers.frombytes(payload[:len(payload) - len(payload) % numbers.itemsize])
                        fds.extend(numbers)
                assembly.feed(got, fds)
        except BaseException:
            assembly.close()
            raise
        try:
            return assembly.result()
        except CurvineError as exc:     # the worker's error or a confused stream: the caller falls back
            raise LocalMiss(str(exc)) from None


class LocalFds:
    def __init__(self, *, token: str, timeout_s: float, keep: int = 128) -> None:
        self._token = token
        self._timeout_s = timeout_s
        self._keep = keep
        self._blocks: OrderedDict[int, LocalBlock] = OrderedDict()
        self._connections: dict[str, _UnixConnection] = {}
        self.hits = 0           # reads served from a descriptor (tests, benchmark)
        self.opened = 0         # descriptors asked of a worker

    async def _connection(self, path: str) -> _UnixConnection:
        conn = self._connections.get(path)
        if conn is not None:
            return conn
        sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
        try:
            await sock.connect(path)
            conn = _UnixConnection(sock)
            _reply, fd = await conn.exchange(frames.Op.HELLO, DataHeader(token=self._token))
            if fd is not None:
                os.close(fd)
        except BaseException:
            sock.close()
            raise
        if path in self._connections:       # another task connected meanwhile: keep one
            sock.close()
            return self._connections[path]
        self._connections[path] = conn
        return conn

    async def _open(self, path: str, block: BlockInfo) -> LocalBlock:
        cached = self._blocks.get(block.block_id)
        if cached is not None:
            self._blocks.move_to_end(block.block_id)
            return cached
        whole = verifiable_range(block.length, block.checksum != 0, 0, block.length)
        header = DataHeader(block_id=block.block_id, offset=0, length=whole.length, checksum=block.checksum)
        conn: _UnixConnection | None = None
        try:
            with trio.fail_after(self._timeout_s):
                conn = await self._connection(path)
                async with conn.lock:
                    reply, fd = await conn.exchange(frames.Op.READ_BLOCK, header)
        except (OSError, trio.TooSlowError, CurvineError, LocalMiss) as exc:
            dead = self._connections.pop(path, None)
            if dead is not None:
                dead.sock.close()
            raise LocalMiss(f"short-circuit {path}: {exc!r}") from None
        if fd is None:
            raise LocalMiss("short-circuit reply without a descriptor")
        digests = list(reply.chunk_checksums)
        if reply.length < whole.minimum or len(digests) != -(-reply.length // CHUNK) \
                or block.checksum and reply.checksum != block.checksum:
            os.close(fd)
            raise LocalMiss(f"block {block.block_id:x}: {reply.length} bytes, {len(digests)} digests")
        self.opened += 1
        cached = self._blocks.get(block.block_id)
        if cached is not None:              # opened by another task meanwhile
            os.close(fd)
            return cached
        local = self._blocks[block.block_id] = LocalBlock(fd, reply.data_offset, reply.length, digests)
        while len(self._blocks) > self._keep:
            _block_id, old = self._blocks.popitem(last=False)
            self._retire(old)
        return local

    def _retire(self, local: LocalBlock) -> None:
        local.dropped = True
        if local.users == 0:
            os.close(local.fd)

    def drop(self, block_id: int) -> None:
        local = self._blocks.pop(block_id, None)
        if local is not None:
            self._retire(local)

    async def read(self, path: str, block: BlockInfo, offset: int, length: int, out: memoryview,
                   minimum: int, limiter: trio.CapacityLimiter | None = None) -> memoryview:
        """Verified bytes [offset, offset+length) of `block` (chunk-aligned, as for READ_BLOCK) into
        `out`; at least `minimum` of them. LocalMiss on any trouble (the caller falls back). With
        `limiter`, the copies and the digests run in a thread under it (chunk runs fetched ahead,
        fuse/threadfetch.py), each chunk hashed right after its preadv, while in cache."""
        if offset % CHUNK:
            raise LocalMiss(f"unaligned offset {offset}")
        local = await self._open(path, block)
        local.users += 1        # a thread only reads the descriptor and the digests
        try:
            n = min(length, local.length - offset)
            if n < minimum or n < 0:
                raise LocalMiss(f"block {block.block_id:x}: {local.length} bytes stored, {minimum} wanted")
            data = out[:n]
            if limiter is None:
                await self._fill(local.fd, data, local.data_offset + offset)
                bad = self._first_bad(local, data, offset)
            else:
                bad = await trio.to_thread.run_sync(self._fill_and_check, local, data, offset, limiter=limiter)
            if bad is not None:
                self.drop(block.block_id)
                raise LocalMiss(f"block {block.block_id:x}: chunk {bad} fails its digest")
        finally:
            local.release()
        self.hits += 1
        return data

    @staticmethod
    def _first_bad(local: LocalBlock, data: memoryview, offset: int) -> int | None:
        """The first chunk of `data` (from byte `offset` of the block) failing its digest, or None."""
        first = offset // CHUNK
        for number, start in enumerate(range(0, len(data), CHUNK)):
            if layout.checksum(data[start:start + CHUNK]) != local.digests[first + number]:
                return first + number
        return None

    @staticmethod
    def _fill_and_check(local: LocalBlock, view: memoryview, offset: int) -> int | None:
        """Fills `view` from byte `offset` of the block; the first chunk that fails its digest, or None."""
        for start in range(0, len(view), CHUNK):      # each chunk hashed while in cache
            piece = view[start:start + CHUNK]
            LocalFds._fill_blocking(local.fd, piece, local.data_offset + offset + start)
            bad = LocalFds._first_bad(local, piece, offset + start)
            if bad is not None:
                return bad
        return None

    @staticmethod
    async def _fill(fd: int, view: memoryview, position: int) -> None:
        done = 0
        try:
            while done < len(view):    # from the page cache, without leaving the event loop
                n = os.preadv(fd, [view[done:]], position + done, os.RWF_NOWAIT)
                if n == 0:
                    raise LocalMiss(f"stored file ended {len(view) - done} bytes early")
                done += n
        except BlockingIOError:
            pass
        except OSError as exc:
            raise LocalMiss(f"preadv: {exc}") from None
        if done < len(view):           # the rest waits for the disk: in a thread
            await trio.to_thread.run_sync(LocalFds._fill_blocking, fd, view[done:], position + done)

    @staticmethod
    def _fill_blocking(fd: int, view: memoryview, position: int) -> None:
        done = 0
        while done < len(view):
            try:
                n = os.preadv(fd, [view[done:]], position + done)
            except OSError as exc:
                raise LocalMiss(f"preadv: {exc}") from None
            if n == 0:
                raise LocalMiss(f"stored file ended {len(view) - done} bytes early")
            done += n

    def close(self) -> None:
        for local in self._blocks.values():
            self._retire(local)
        self._blocks.clear()
        for conn in self._connections.values():
            conn.sock.close()
        self._connections.clear()

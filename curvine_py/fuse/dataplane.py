"""Block reads on trio sockets: the mount's fast path for READ_BLOCK.

Why: a read served through a worker thread costs two GIL hand-offs and a thread wake-up per
request, and with the kernel's read-ahead keeping several 1 MiB requests in flight those threads
fight pyfuse3 (which copies every reply into the kernel holding the GIL) for it: measured, the
threaded path stalls at ~0.6 GB/s with ~70 futex calls per MiB. Here each FUSE request awaits its
own pooled connection in the trio thread; requests in flight overlap on the sockets, not on threads.

A block whose owner runs on this node is read through the descriptor of its stored file
(fuse/localfds.py: short-circuit, still in the trio thread, same verification).

Frames are the sans-IO codec of core/frames.py; payloads are verified with the same per-chunk
digests as the threaded client (client/workerio.verify).

Error handling: anything unusual (a worker down, a timeout, a digest mismatch, an unknown block)
raises `FastPathMiss`; the caller then serves the request through the threaded client, which
tries the other replicas, reports a bad copy and raises the right CurvineError. So this path adds
speed, never new failure modes. Resource handling: a connection that saw any error is closed,
never pooled again (its stream position is unknown).
"""
from __future__ import annotations

import itertools
import logging
import socket
from collections.abc import Callable, Sequence

import trio

from curvine_py.client.membership import View, WorkerAddress
from curvine_py.client.workerio import verify
from curvine_py.core import frames
from curvine_py.core.domain import BlockInfo
from curvine_py.core.errors import CurvineError
from curvine_py.fuse.localfds import LocalFds, LocalMiss
from curvine_py.proto.curvine.v1.data_pb2 import DataHeader

log = logging.getLogger(__name__)


class FastPathMiss(Exception):
    """This read is better served by the threaded client (see the module docstring)."""


def reply_prefix(raw: bytes | bytearray, op: frames.Op, request_id: int, max_payload: int) -> frames.FramePrefix:
    """The prefix of the reply to request `request_id` of `op` (FastPathMiss for any other)."""
    prefix = frames.decode_prefix(raw, max_payload=max_payload, expect_response=True)
    if prefix.op != op or prefix.request_id != request_id:
        raise FastPathMiss(f"reply {prefix.op.name}#{prefix.request_id} to {op.name}#{request_id}")
    return prefix


class _Connection:
    def __init__(self, sock: trio.socket.SocketType, max_payload: int) -> None:
        self.sock = sock
        self.max_payload = max_payload
        self.ids = itertools.count(1)

    async def send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            sent = await self.sock.send(view)
            view = view[sent:]

    async def recv_into(self, view: memoryview) -> None:
        got = 0
        while got < len(view):
            n = await self.sock.recv_into(view[got:])
            if n == 0:
                raise FastPathMiss("connection closed by the worker")
            got += n

    async def request(self, op: frames.Op, header: DataHeader, out: memoryview | None) -> tuple[DataHeader, int]:
        """One request without payload; a reply payload lands in `out`. Returns (reply, length)."""
        request_id = next(self.ids) & frames.MAX_REQUEST_ID
        await self.send(frames.encode(op, request_id, header))
        raw = bytearray(frames.PREFIX_SIZE)
        await self.recv_into(memoryview(raw))
        prefix = reply_prefix(raw, op, request_id, self.max_payload)
        reply = DataHeader()
        if prefix.header_length:
            body = bytearray(prefix.header_length)
            await self.recv_into(memoryview(body))
            reply = frames.decode_header(body)
        if prefix.payload_length:
            if out is None or len(out) < prefix.payload_length:
                raise FastPathMiss("reply payload larger than the buffer")
            await self.recv_into(out[:prefix.payload_length])
        if reply.errno:
            raise FastPathMiss(f"worker answered errno {reply.errno}: {reply.message}")
        return reply, prefix.payload_length

    def close(self) -> None:
        self.sock.close()


class TrioBlockReader:
    def __init__(self, *, token: str, timeout_s: float, max_payload: int, per_worker: int = 8,
                 is_local: Callable[[WorkerAddress], bool] = lambda _worker: False) -> None:
        self._token = token
        self._is_local = is_local
        self._timeout_s = timeout_s
        self._max_payload = max_payload
        self._per_worker = per_worker
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self.local = LocalFds(token=token, timeout_s=timeout_s)
        self.hits = 0       # reads served here (for tests and the benchmark)

    async def _connect(self, worker: WorkerAddress) -> _Connection:
        sock = trio.socket.socket(trio.socket.AF_INET6 if ":" in worker.host else trio.socket.AF_INET,
                                  trio.socket.SOCK_STREAM)
        try:
            await sock.connect((worker.host, worker.port))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Connection(sock, self._max_payload)
            await conn.request(frames.Op.HELLO, DataHeader(token=self._token), None)
            return conn
        except BaseException:
            sock.close()
            raise

    async def _read_from(self, worker: WorkerAddress, header: DataHeader, out: memoryview) -> tuple[DataHeader, int]:
        key = (worker.host, worker.port)
        idle = self._idle.get(key)
        conn = idle.pop() if idle else None
        try:
            with trio.fail_after(self._timeout_s):
                if conn is None:
                    conn = await self._connect(worker)
                result = await conn.request(frames.Op.READ_BLOCK, header, out)
        except BaseException:
            if conn is not None:
                conn.close()
            raise
        pool = self._idle.setdefault(key, [])
        if len(pool) < self._per_worker:
            pool.append(conn)
        else:
            conn.close()
        return result

    def serves_locally(self, view: View, block: BlockInfo) -> bool:
        """Whether `read` would take the block from a worker on this node (by descriptor)."""
        return any(self._is_local(view.workers[w]) for w in block.worker_ids if w in view.workers)

    async def read(self, view: View, block: BlockInfo, offset: int, length: int, out: memoryview,
                   minimum: int) -> memoryview:
        """Verified bytes [offset, offset+length) of a block into `out` (at least `minimum`
        bytes must arrive; the worker may clip at its stored end). FastPathMiss on any trouble."""
        candidates: Sequence[str] = [w for w in block.worker_ids if w in view.workers]
        if not candidates:
            raise FastPathMiss("no live worker holds the block")
        # A replica on this node first: its stored file is read by descriptor, no TCP.
        worker = next((view.workers[w] for w in candidates if self._is_local(view.workers[w])),
                      view.workers[candidates[0]])
        if self._is_local(worker):
            try:
                data = await self.local.read(worker.unix_socket, block, offset, length, out, minimum)
            except LocalMiss as exc:
                raise FastPathMiss(f"worker {worker.worker_id} (local): {exc}") from None
            self.hits += 1
            return data
        request = DataHeader(block_id=block.block_id, offset=offset, length=length, checksum=block.checksum)
        try:
            reply, received = await self._read_from(worker, request, out)
        except (OSError, trio.TooSlowError, CurvineError) as exc:
            raise FastPathMiss(f"worker {worker.worker_id}: {exc!r}") from None
        data = out[:received]
        if received < minimum or not verify(data, reply, whole=False) \
                or block.checksum and reply.checksum != block.checksum:
            raise FastPathMiss(f"block {block.block_id:x}: short or unverifiable reply")
        self.hits += 1
        return data

    def close(self) -> None:
        self.local.close()
        for conns in self._idle.values():
            for conn in conns:
                conn.close()
        self._idle.clear()

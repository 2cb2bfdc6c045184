"""Blocking READ_BLOCKs for the mount's threaded chunk runs (fuse/threadfetch.py): each chunk of a
reply received by one recv (MSG_WAITALL) and verified right after it lands.

Why not the client's connections (client/dataconn.py): they receive a payload with recv_into calls
that return whatever the socket holds (64-256 KiB on loopback), and every return takes the GIL
again. From a thread beside the mount's trio thread, which holds the GIL while pyfuse3 copies each
reply into the kernel, each of those takes waits its turn (sys.setswitchinterval, fuse/main.py):
measured, runs fetched in threads that way read 0.33-0.48 GB/s against 0.65 on the trio sockets,
and 0.71 with one recv per chunk. MSG_WAITALL makes the kernel fill the whole chunk before the
call returns, so a chunk costs one GIL take for the receive and one for its digest.

Scope: plain TCP to one worker (the first live holder of the block), no TLS (threadfetch.py uses
the client for those, and for owners on this node). Error handling: anything unusual (a refused or
dropped connection, a timeout, an error reply, a short reply, a chunk that fails its digest) raises
`FastPathMiss`; the caller then reads through the client, which tries the other replicas, reports a bad
copy and raises the right CurvineError. Resource handling: a connection that saw any error is
closed, never pooled again; waits are bounded by kernel socket timeouts (SO_RCVTIMEO/SO_SNDTIMEO):
a worker that stops sending costs `timeout_s` at most per wait.
"""
from __future__ import annotations

import itertools
import socket
import struct
import threading

from curvine_py.client.membership import WorkerAddress
from curvine_py.core import frames, layout
from curvine_py.core.domain import BlockInfo
from curvine_py.core.errors import CurvineError
from curvine_py.fuse.dataplane import FastPathMiss, reply_prefix
from curvine_py.proto.curvine.v1.data_pb2 import DataHeader

CHUNK = layout.CHUNK_SIZE
_TIMEVAL = struct.Struct("@ll")


class _Connection:
    def __init__(self, sock: socket.socket, max_payload: int) -> None:
        self.sock = sock
        self.max_payload = max_payload
        self.ids = itertools.count(1)

    def fill(self, view: memoryview) -> None:
        got = 0
        while got < len(view):      # more than one call only after a timeout or a signal
            n = self.sock.recv_into(view[got:], len(view) - got, socket.MSG_WAITALL)
            if n == 0:
                raise FastPathMiss("connection closed by the worker")
            got += n

    def request(self, op: frames.Op, header: DataHeader) -> tuple[DataHeader, int]:
        """Sends a request; returns the reply's header and payload length (the payload is next)."""
        request_id = next(self.ids) & frames.MAX_REQUEST_ID
        self.sock.sendall(frames.encode(op, request_id, header))
        raw = bytearray(frames.PREFIX_SIZE)
        self.fill(memoryview(raw))
        prefix = reply_prefix(raw, op, request_id, self.max_payload)
        reply = DataHeader()
        if prefix.header_length:
            body = bytearray(prefix.header_length)
            self.fill(memoryview(body))
            reply = frames.decode_header(body)
        if reply.errno:
            raise FastPathMiss(f"worker answered errno {reply.errno}: {reply.message}")
        return reply, prefix.payload_length


class BlockReceiver:
    def __init__(self, *, token: str, timeout_s: float, max_payload: int, per_worker: int = 4) -> None:
        self._token = token
        self._timeout_s = timeout_s
        self._max_payload = max_payload
        self._per_worker = per_worker
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._lock = threading.Lock()
        self._closed = False

    def _connect(self, worker: WorkerAddress) -> _Connection:
        sock = socket.create_connection((worker.host, worker.port), timeout=self._timeout_s)
        try:
            sock.settimeout(None)       # kernel timeouts instead (module docstring)
            whole = int(self._timeout_s)
            timeval = _TIMEVAL.pack(whole, max(1, int((self._timeout_s - whole) * 1e6)))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Connection(sock, self._max_payload)
            conn.request(frames.Op.HELLO, DataHeader(token=self._token))
            return conn
        except BaseException:
            sock.close()
            raise

    def read(self, worker: WorkerAddress, block: BlockInfo, offset: int, length: int, out: memoryview,
             minimum: int) -> memoryview:
        """Verified bytes [offset, offset+length) of `block` (chunk-aligned) from `worker` into
        `out`; at least `minimum` of them. Blocks: call it in a thread. FastPathMiss on any trouble."""
        key = (worker.host, worker.port)
        with self._lock:
            idle = self._idle.get(key)
            conn = idle.pop() if idle else None
        try:
            if conn is None:
                conn = self._connect(worker)
            data = self._receive(conn, block, offset, length, out, minimum)
        except (OSError, CurvineError) as exc:
            if conn is not None:
                conn.sock.close()
            raise FastPathMiss(f"worker {worker.worker_id}: {exc!r}") from None
        except BaseException:
            if conn is not None:
                conn.sock.close()
            raise
        with self._lock:
            pool = self._idle.setdefault(key, [])
            if not self._closed and len(pool) < self._per_worker:
                pool.append(conn)
                conn = None
        if conn is not None:
            conn.sock.close()
        return data

    @staticmethod
    def _receive(conn: _Connection, block: BlockInfo, offset: int, length: int, out: memoryview,
                 minimum: int) -> memoryview:
        reply, received = conn.request(frames.Op.READ_BLOCK, DataHeader(block_id=block.block_id, offset=offset,
                                                                         length=length, checksum=block.checksum))
        if block.checksum and reply.checksum != block.checksum:
            raise FastPathMiss(f"block {block.block_id:x}: not the block committed")
        if received > len(out) or received < minimum:
            raise FastPathMiss(f"block {block.block_id:x}: a reply of {received} bytes, {minimum}-{len(out)} wanted")
        digests = list(reply.chunk_checksums)
        if len(digests) != -(-received // CHUNK):
            raise FastPathMiss(f"block {block.block_id:x}: {len(digests)} digests for {received} bytes")
        data = out[:received]
        for number, start in enumerate(range(0, received, CHUNK)):
            piece = data[start:start + CHUNK]
            conn.fill(piece)
            if layout.checksum(piece) != digests[number]:
                raise FastPathMiss(f"block {block.block_id:x}: chunk {offset // CHUNK + number} fails its digest")
        return data

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for conns in self._idle.values():
                for conn in conns:
                    conn.sock.close()
            self._idle.clear()

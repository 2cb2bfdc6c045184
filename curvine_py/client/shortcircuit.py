"""Short-circuit local reads: the worker on this node passes the stored file's descriptor over its
unix socket (SCM_RIGHTS) and we read straight from the page cache with `os.preadv` into our
aligned buffer: no TCP, no worker-side copy (~12 GB/s here instead of ~1.4 GB/s).

An fd rather than a path (as Curvine does) needs no shared permissions between client and worker,
and keeps reading the object even if it is evicted (unlinked) meanwhile.
"""
from __future__ import annotations

import contextlib
import itertools
import os
import socket
import threading

from curvine_py.client import digests
from curvine_py.client.buffers import aligned
from curvine_py.core import frames
from curvine_py.core.errors import InvalidArgument, ProtocolError, Unavailable, from_errno
from curvine_py.proto.curvine.v1.data_pb2 import DataHeader

_MAX_REPLY = frames.PREFIX_SIZE + frames.MAX_HEADER


class ShortCircuitClient:
    """One unix-socket connection per local worker socket path, serialised by a lock (a request is
    a few microseconds of worker work: the bulk read happens here, on the fd)."""

    def __init__(self, path: str, *, token: str, timeout_s: float) -> None:
        self.path = path
        self._token = token
        self._timeout_s = timeout_s
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    def _connect(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self._timeout_s)
        try:
            sock.connect(self.path)
        except OSError as exc:
            sock.close()
            raise Unavailable(f"short-circuit socket {self.path}: {exc.strerror or exc}") from None
        self._sock = sock
        _header, fd = self._exchange(frames.Op.HELLO, DataHeader(token=self._token))
        if fd is not None:
            os.close(fd)
        return sock

    def close(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None

    def _exchange(self, op: frames.Op, header: DataHeader) -> tuple[DataHeader, int | None]:
        assert self._sock is not None
        request_id = next(self._ids) & frames.MAX_REQUEST_ID
        self._sock.sendall(frames.encode(op, request_id, header))
        buffer = bytearray()
        fds: list[int] = []
        need = frames.PREFIX_SIZE
        prefix = None
        while len(buffer) < need:
            data, got_fds, _flags, _addr = socket.recv_fds(self._sock, _MAX_REPLY, 1)
            if not data:
                raise Unavailable("short-circuit socket closed")
            buffer += data
            fds += got_fds
            if prefix is None and len(buffer) >= frames.PREFIX_SIZE:
                prefix = frames.decode_prefix(bytes(buffer[:frames.PREFIX_SIZE]), max_payload=0,
                                              expect_response=True)
                need = frames.PREFIX_SIZE + prefix.header_length
        assert prefix is not None
        if prefix.request_id != request_id or prefix.op != op:
            for stray in fds:
                os.close(stray)
            raise ProtocolError("short-circuit reply out of order")
        reply = frames.decode_header(bytes(buffer[frames.PREFIX_SIZE:need]))
        for extra in fds[1:]:
            os.close(extra)
        fd = fds[0] if fds else None
        if reply.errno:
            if fd is not None:
                os.close(fd)
            raise from_errno(reply.errno, reply.message)
        return reply, fd

    def read(self, op: frames.Op, header: DataHeader, out: memoryview | None = None,
             *, digest: bool = False) -> tuple[DataHeader, memoryview | None, list[int] | None]:
        """GET or READ_BLOCK through the fd. Returns the reply header, the bytes read (None on a
        KV miss) and, with `digest`, their chunk digests computed as they were read (digests.py)."""
        with self._lock:
            try:
                if self._sock is None:
                    self._connect()
                reply, fd = self._exchange(op, header)
            except (OSError, Unavailable, ProtocolError) as exc:
                self.close()
                if isinstance(exc, OSError):
                    raise Unavailable(f"short-circuit {self.path}: {exc}") from None
                raise
        if fd is None:
            if op == frames.Op.GET and not reply.found:
                return reply, None, None
            raise ProtocolError("short-circuit reply without a file descriptor")
        try:
            length = reply.length
            if out is not None and len(out) < length:
                raise InvalidArgument(f"buffer of {len(out)} bytes is too small for {length}")
            target = out[:length] if out is not None else aligned(length)

            def read_into(piece: memoryview, offset: int) -> None:
                done = 0
                while done < len(piece):
                    n = os.preadv(fd, [piece[done:]], reply.data_offset + offset + done)
                    if n == 0:
                        raise ProtocolError(f"stored file ended after {offset + done} of {length} bytes")
                    done += n

            if digest:
                return reply, target, digests.fill_and_digest(target, read_into)
            read_into(target, 0)
            return reply, target, None
        finally:
            os.close(fd)

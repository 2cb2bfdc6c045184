"""Blocking data-plane connections to workers: one request at a time per connection, pooled.

Resource handling: a connection that saw a transport error, a timeout or a protocol error is
closed, never returned to the pool (its stream position is unknown). An error *reply* (errno set)
leaves the stream in sync, so that connection is reused.
"""
from __future__ import annotations

import contextlib
import itertools
import logging
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from curvine_py.client import digests
from curvine_py.client.buffers import aligned
from curvine_py.core import frames, layout
from curvine_py.core.errors import (
    CurvineError,
    InvalidArgument,
    LocalProtocolError,
    ProtocolError,
    Timeout,
    Unavailable,
    from_errno,
)
from curvine_py.proto.curvine.v1.data_pb2 import DataHeader
from curvine_py.transport import blocking

log = logging.getLogger(__name__)

# Payloads up to this size leave in one send together with their header.
INLINE_PAYLOAD = 64 * 1024


@dataclass(frozen=True, slots=True)
class Reply:
    header: DataHeader
    payload: memoryview | None   # the received bytes (a slice of the caller's buffer if given)
    digests: list[int] | None = None   # chunk digests of payload, when asked for (computed while receiving)


class WorkerConnection:
    def __init__(self, host: str, port: int, *, token: str, timeout_s: float, max_payload: int) -> None:
        self.address = (host, port)
        self._max_payload = max_payload
        self._ids = itertools.count(1)
        try:
            self._sock = socket.create_connection(self.address, timeout=timeout_s)
        except TimeoutError:
            raise Timeout(f"connect to worker {host}:{port} timed out") from None
        except OSError as exc:
            raise Unavailable(f"cannot connect to worker {host}:{port}: {exc.strerror or exc}") from None
        blocking.set_fast_options(self._sock)
        # A worker on this host: Reno, as the worker sets on its side (no BBR pacing of puts).
        blocking.set_local_options(self._sock)
        hello = self.request(frames.Op.HELLO, DataHeader(token=token))
        self.worker_id = hello.header.worker_id
        self.epoch = hello.header.epoch

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()

    def request(self, op: frames.Op, header: DataHeader,
                payload: bytes | bytearray | memoryview | None = None,
                out: memoryview | None = None, *, digest: bool = False) -> Reply:
        """Sends one request and reads its reply. A reply payload lands in `out` when given
        (InvalidArgument if too small, after draining it) or in a new page-aligned buffer. With
        `digest`, the payload's chunk digests are computed as it arrives (digests.py) and returned
        in `Reply.digests`."""
        request_id = next(self._ids) & frames.MAX_REQUEST_ID
        try:
            self._send(op, request_id, header, payload)
            prefix, reply = blocking.read_head(self._sock, max_payload=self._max_payload,
                                               expect_response=True)
            if prefix.op != op or prefix.request_id != request_id:
                raise ProtocolError(f"reply {prefix.op.name}#{prefix.request_id} to {op.name}#{request_id}")
            data, chunk_digests = self._receive_payload(prefix.payload_length, out, digest)
        except TimeoutError:
            self.close()
            raise Timeout(f"worker {self.address[0]}:{self.address[1]} did not answer {op.name} in time") \
                from None
        except OSError as exc:
            self.close()
            raise Unavailable(f"worker {self.address[0]}:{self.address[1]}: {exc.strerror or exc}") from None
        except (Unavailable, ProtocolError):
            self.close()
            raise
        if reply.errno:
            raise from_errno(reply.errno, reply.message)
        return Reply(reply, data, chunk_digests)

    def _send(self, op: frames.Op, request_id: int, header: DataHeader,
              payload: bytes | bytearray | memoryview | None) -> None:
        """A request frame; with `header.digest_trailer` the payload's chunk digests are computed
        as it goes out and sent after it (frames.py)."""
        if payload is None or not header.digest_trailer:
            blocking.send_frame(self._sock, op, request_id, header, payload)
            return
        view = memoryview(payload).cast("B")
        if header.length != len(view):
            raise LocalProtocolError(f"digest trailer: length {header.length} != payload of {len(view)} bytes")
        head = frames.encode(op, request_id, header, len(view) + frames.trailer_size(len(view)))
        if len(view) <= INLINE_PAYLOAD:   # one segment for small objects
            self._sock.sendall(head + bytes(view) + frames.encode_trailer(layout.chunk_digests(view)))
            return
        self._sock.sendall(head)
        chunk_digests = digests.send_and_digest(view, self._sock.sendall)
        self._sock.sendall(frames.encode_trailer(chunk_digests))

    def _receive_payload(self, length: int, out: memoryview | None,
                         digest: bool) -> tuple[memoryview | None, list[int] | None]:
        if not length:
            return None, None
        if out is not None and len(out) < length:
            blocking.discard(self._sock, length)
            raise InvalidArgument(f"buffer of {len(out)} bytes is too small for {length}")
        target = out[:length] if out is not None else aligned(length)
        if digest:
            sock = self._sock
            return target, digests.fill_and_digest(
                target, lambda piece, _offset: blocking.recv_exactly_into(sock, piece))
        blocking.recv_exactly_into(self._sock, target)
        return target, None


class ConnectionPool:
    """Idle connections per worker address, created on demand, at most `per_worker` kept idle."""

    def __init__(self, *, token: str, timeout_s: float, max_payload: int, per_worker: int = 4) -> None:
        self._token, self._timeout_s, self._max_payload = token, timeout_s, max_payload
        self._per_worker = per_worker
        self._idle: dict[tuple[str, int], list[WorkerConnection]] = {}
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def connection(self, host: str, port: int) -> Iterator[WorkerConnection]:
        key = (host, port)
        with self._lock:
            idle = self._idle.get(key)
            conn = idle.pop() if idle else None
        if conn is None:
            conn = WorkerConnection(host, port, token=self._token, timeout_s=self._timeout_s,
                                    max_payload=self._max_payload)
        try:
            yield conn
        except (Unavailable, Timeout, ProtocolError):
            conn.close()
            raise
        except CurvineError:
            self._give_back(key, conn)
            raise
        except BaseException:
            conn.close()
            raise
        else:
            self._give_back(key, conn)

    def _give_back(self, key: tuple[str, int], conn: WorkerConnection) -> None:
        with self._lock:
            idle = self._idle.setdefault(key, [])
            if len(idle) < self._per_worker:
                idle.append(conn)
                return
        conn.close()

    def drop(self, host: str, port: int) -> None:
        """Forget every idle connection to a worker (it restarted or died)."""
        with self._lock:
            idle = self._idle.pop((host, port), [])
        for conn in idle:
            conn.close()

    def close(self) -> None:
        with self._lock:
            everything, self._idle = self._idle, {}
        for conns in everything.values():
            for conn in conns:
                conn.close()

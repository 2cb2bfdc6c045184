"""Blocking-socket transport for data-plane frames (worker server threads, the sync client).

Payload bytes are never copied by Python: they go out with `os.sendfile` or one `sendall` of the
caller's buffer, and come in with `recv_into` the caller's (ideally page-aligned) buffer.
Blocking sockets release the GIL in every syscall, so a thread per connection overlaps well.
"""
from __future__ import annotations

import os
import socket

from curvine_py.core import frames
from curvine_py.core.errors import ProtocolError, Unavailable
from curvine_py.proto.curvine.v1.data_pb2 import DataHeader

_DISCARD_CHUNK = 1 << 20


def recv_exactly_into(sock: socket.socket, view: memoryview) -> None:
    """Fills `view` completely. EOF before that is `Unavailable` (the peer went away)."""
    got, total = 0, len(view)
    while got < total:
        n = sock.recv_into(view[got:], total - got)
        if n == 0:
            raise Unavailable(f"connection closed after {got} of {total} bytes")
        got += n


def recv_exactly(sock: socket.socket, count: int) -> bytes:
    buffer = bytearray(count)
    recv_exactly_into(sock, memoryview(buffer))
    return bytes(buffer)


def discard(sock: socket.socket, count: int) -> None:
    """Reads and drops `count` bytes (a payload we will not keep), in bounded chunks."""
    scratch = memoryview(bytearray(min(count, _DISCARD_CHUNK) or 1))
    while count > 0:
        n = sock.recv_into(scratch, min(count, len(scratch)))
        if n == 0:
            raise Unavailable("connection closed while discarding payload")
        count -= n


def read_head(sock: socket.socket, *, max_payload: int,
              expect_response: bool) -> tuple[frames.FramePrefix, DataHeader]:
    """Reads prefix + header; the caller then owns the next `prefix.payload_length` bytes."""
    raw = recv_exactly(sock, frames.PREFIX_SIZE)
    prefix = frames.decode_prefix(raw, max_payload=max_payload, expect_response=expect_response)
    header = frames.decode_header(recv_exactly(sock, prefix.header_length)) if prefix.header_length \
        else DataHeader()
    return prefix, header


def send_frame(sock: socket.socket, op: frames.Op, request_id: int, header: DataHeader,
               payload: bytes | bytearray | memoryview | None = None, *, response: bool = False) -> None:
    length = len(payload) if payload is not None else 0
    head = frames.encode(op, request_id, header, length, response=response)
    if payload is not None and length:
        if length <= 64 * 1024:
            sock.sendall(head + bytes(payload))  # one segment for small objects
        else:
            sock.sendall(head)
            sock.sendall(payload)
    else:
        sock.sendall(head)


def send_frame_from_file(sock: socket.socket, op: frames.Op, request_id: int, header: DataHeader,
                         fd: int, offset: int, count: int) -> None:
    """A response whose payload is `count` bytes of an open file: zero-copy `os.sendfile`."""
    sock.sendall(frames.encode(op, request_id, header, count, response=True))
    sent = 0
    out = sock.fileno()
    while sent < count:
        n = os.sendfile(out, fd, offset + sent, count - sent)
        if n == 0:
            raise ProtocolError(f"file ended after {sent} of {count} bytes")
        sent += n


def set_fast_options(sock: socket.socket) -> None:
    """No Nagle: request/response frames must not wait for a delayed ACK."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

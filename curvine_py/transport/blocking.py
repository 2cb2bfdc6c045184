"""Blocking-socket transport for data-plane frames (worker server threads, the sync client).

Payload bytes are never copied by Python: they go out with `os.sendfile` or one `sendall` of the
caller's buffer, and come in with `recv_into` the caller's (ideally page-aligned) buffer.
Blocking sockets release the GIL in every syscall, so a thread per connection overlaps well.
"""
from __future__ import annotations

import ipaddress
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


# Congestion control for a connection that never leaves this host (see set_local_options).
LOCAL_CONGESTION_CONTROL = b"reno"


def is_loopback_address(host: str) -> bool:
    """127.0.0.0/8, ::1 or ::ffff:127.x.y.z (a scope suffix such as %lo is ignored)."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def is_loopback_peer(sock: socket.socket) -> bool:
    """True for a TCP connection whose peer is this host's loopback."""
    if sock.family not in (socket.AF_INET, socket.AF_INET6):
        return False
    try:
        host = sock.getpeername()[0]
    except OSError:
        return False
    return is_loopback_address(host)


def set_local_options(sock: socket.socket) -> bool:
    """For a loopback peer: plain Reno congestion control instead of the host's default. Why: with
    BBR as the default (as on the bench machine), every send is paced by hrtimers and loopback
    pays for the pacing (timer softirqs, small bursts) with nothing to gain, there being no
    network to probe. `bench kv` measures both (its raw pair with the host default and with Reno
    on both ends): loopback gets of 4-32 MiB moved 1.2-2.0 GB/s under BBR, 6.1-8.8 GB/s with
    Reno, on the bench machine. Reno is in every kernel's allowed
    list (no privilege needed). Returns whether it was applied (False: not loopback or refused)."""
    if not is_loopback_peer(sock):
        return False
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, LOCAL_CONGESTION_CONTROL)
    except OSError:
        return False
    return True

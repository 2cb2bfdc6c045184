"""Blocking-socket transport for data-plane frames (worker server threads, the sync client).

Payload bytes are never copied by Python: they go out with `os.sendfile` or one `sendall` of the
caller's buffer, and come in with `recv_into` the caller's (ideally page-aligned) buffer.
Blocking sockets release the GIL in every syscall, so a thread per connection overlaps well.
"""
from __future__ import annotations

import ipaddress
import os
import socket
import struct
import time
from collections.abc import Callable

from curvine_py.core import frames
from curvine_py.core.errors import ProtocolError, Timeout, Unavailable
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


# -- time limits on a server's blocking sockets ------------------------------------------------------
#
# Kernel timeouts (SO_RCVTIMEO/SO_SNDTIMEO) rather than Python's socket timeouts: those put the
# socket in non-blocking mode and add a poll() before every recv and send (and break os.sendfile),
# while a kernel timeout costs nothing until it fires. A recv or send that times out fails with
# EAGAIN (BlockingIOError).

_TIMEVAL = struct.Struct("@ll")


def _timeval(seconds: float) -> bytes:
    if seconds <= 0:
        return _TIMEVAL.pack(0, 0)   # no timeout
    whole = int(seconds)
    micros = int((seconds - whole) * 1_000_000)
    return _TIMEVAL.pack(whole, micros if whole or micros else 1)   # (0, 0) would mean never


def set_recv_timeout(sock: socket.socket, seconds: float) -> None:
    """A blocking recv on `sock` fails with EAGAIN after `seconds` without data (<= 0: never)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _timeval(seconds))


def set_send_timeout(sock: socket.socket, seconds: float) -> None:
    """A blocking send on `sock` fails with EAGAIN after `seconds` without progress (<= 0: never)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _timeval(seconds))


class HeadReader:
    """Reads the head of each request of a server connection under two limits: the wait for its
    first byte (`wait_s`: the idle timeout, or what is left of the authentication deadline), and
    `header_s` from that first byte to the last byte of the head (a half-sent header held open is
    closed). Both raise `Timeout`; a clean EOF before a request is `begin() -> False`.

    Cost: the wait timeout is a kernel receive timeout set only when it changes; the rest of a head
    is first taken without waiting (it usually came with the first byte), so the header deadline
    costs a setsockopt only for a head that arrives in pieces."""

    def __init__(self, sock: socket.socket, *, wait_s: float, header_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._sock = sock
        self._header_s = header_s
        self._clock = clock
        self._wait_s = wait_s
        self._deadline = 0.0
        set_recv_timeout(sock, wait_s)

    @property
    def wait_s(self) -> float:
        return self._wait_s

    @wait_s.setter
    def wait_s(self, seconds: float) -> None:
        if seconds != self._wait_s:
            self._wait_s = seconds
            set_recv_timeout(self._sock, seconds)

    def begin(self, view: memoryview) -> bool:
        """Fills `view`, the start of a request: False on EOF before its first byte."""
        try:
            got = self._sock.recv_into(view)
        except BlockingIOError:
            raise Timeout(f"idle for {self._wait_s:g} s") from None
        if got == 0:
            return False
        self._deadline = self._clock() + self._header_s if self._header_s > 0 else 0.0
        if got < len(view):
            self.more(view[got:])
        return True

    def more(self, view: memoryview) -> None:
        """Fills `view`, more of the head begun by `begin`, before the header deadline."""
        got, total = 0, len(view)
        try:
            got = self._sock.recv_into(view, total, socket.MSG_DONTWAIT)
            if got == 0 and total:
                raise Unavailable("connection closed inside a frame header")
        except BlockingIOError:
            got = 0
        if got == total:
            return
        try:
            while got < total:
                left = self._deadline - self._clock() if self._deadline else self._wait_s
                if self._deadline and left <= 0:
                    raise Timeout(f"no full frame header within {self._header_s:g} s")
                set_recv_timeout(self._sock, left)
                try:
                    n = self._sock.recv_into(view[got:], total - got)
                except BlockingIOError:
                    raise Timeout(f"no full frame header within {self._header_s:g} s") from None
                if n == 0:
                    raise Unavailable(f"connection closed inside a frame header ({got} of {total} bytes)")
                got += n
        finally:
            set_recv_timeout(self._sock, self._wait_s)

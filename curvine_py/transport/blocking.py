"""Blocking-socket transport for data-plane frames (worker server threads, the sync client).

Payload bytes are never copied by Python: they go out with `os.sendfile` or one `sendall` of the
caller's buffer, and come in with `recv_into` the caller's (ideally page-aligned) buffer.
Blocking sockets release the GIL in every syscall, so a thread per connection overlaps well.
"""
from __future__ import annotations

import os
import socket
import ssl
import struct
import time
from collections.abc import Callable, Sequence

from curvine_py.core import frames
from curvine_py.core.addresses import is_loopback_address
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


# Bytes asked of the kernel when a frame head is read: a head (prefix + header, ~100-300 bytes) and,
# for a small object, its payload come in one recv; a large payload's first few KiB then go through
# this buffer (a copy of at most this much) and the rest straight into the caller's.
HEAD_READ = 8192


class ReadAhead:
    """Reads a framed stream through a small buffer: one `recv` usually brings a whole frame head
    (the prefix and header used to take two) and, for small objects or pipelined requests, what
    follows it. Payloads are then taken from the buffer first and straight from the socket after
    (`read_into`, `discard`), so bulk bytes still land in the caller's buffer without a copy.
    The waits are the socket's (a kernel or Python timeout set by the owner)."""

    def __init__(self, sock: socket.socket, capacity: int = HEAD_READ) -> None:
        self.sock = sock
        self._buffer = bytearray(max(capacity, frames.PREFIX_SIZE))
        self._view = memoryview(self._buffer)
        self._start = self._end = 0

    @property
    def buffered(self) -> int:
        """Bytes received and not yet consumed."""
        return self._end - self._start

    def _room(self, count: int) -> None:
        """Makes room for `count` more bytes after the buffered ones (moved to the front, or the
        buffer grown for a header larger than it)."""
        have = self._end - self._start
        if not have:
            self._start = self._end = 0
        if self._end + count <= len(self._buffer):
            return
        if have + count > len(self._buffer):
            grown = bytearray(have + count)
            grown[:have] = self._view[self._start:self._end]
            self._buffer, self._view = grown, memoryview(grown)
        else:
            self._view[:have] = self._view[self._start:self._end]
        self._start, self._end = 0, have

    def receive_some(self) -> int:
        """One `recv` into the free part of the buffer (emptied first when nothing is buffered);
        returns the bytes received (0 = EOF)."""
        self._room(1)
        n = self.sock.recv_into(self._view[self._end:], len(self._buffer) - self._end)
        self._end += n
        return n

    def take(self, count: int, fill: Callable[[memoryview], None] | None = None) -> memoryview:
        """The next `count` bytes (a view into the buffer, valid until the next read). Missing
        bytes come from `fill(view)` (which must fill `view` exactly) or else from `recv`s that
        may read ahead."""
        missing = count - (self._end - self._start)
        if missing > 0:
            self._room(missing)
            if fill is not None:
                fill(self._view[self._end:self._end + missing])
                self._end += missing
            else:
                while self._end - self._start < count:
                    n = self.sock.recv_into(self._view[self._end:], len(self._buffer) - self._end)
                    if n == 0:
                        raise Unavailable(f"connection closed inside a frame ({self._end - self._start} "
                                          f"of {count} bytes)")
                    self._end += n
        start = self._start
        self._start += count
        return self._view[start:start + count]

    def head(self, *, max_payload: int, expect_response: bool) -> tuple[frames.FramePrefix, DataHeader]:
        """Prefix + header; the caller then owns the next `prefix.payload_length` bytes."""
        prefix = frames.decode_prefix(self.take(frames.PREFIX_SIZE), max_payload=max_payload,
                                      expect_response=expect_response)
        header = frames.decode_header(self.take(prefix.header_length)) if prefix.header_length else DataHeader()
        return prefix, header

    def read_into(self, view: memoryview) -> None:
        """Fills `view`: buffered bytes first, then straight from the socket."""
        got = min(len(view), self._end - self._start)
        if got:
            view[:got] = self._view[self._start:self._start + got]
            self._start += got
        if got < len(view):
            recv_exactly_into(self.sock, view[got:])

    def discard(self, count: int) -> None:
        got = min(count, self._end - self._start)
        self._start += got
        if count > got:
            discard(self.sock, count - got)


def read_head(sock: socket.socket, *, max_payload: int,
              expect_response: bool) -> tuple[frames.FramePrefix, DataHeader]:
    """Reads prefix + header; the caller then owns the next `prefix.payload_length` bytes."""
    raw = recv_exactly(sock, frames.PREFIX_SIZE)
    prefix = frames.decode_prefix(raw, max_payload=max_payload, expect_response=expect_response)
    header = frames.decode_header(recv_exactly(sock, prefix.header_length)) if prefix.header_length \
        else DataHeader()
    return prefix, header


def send_all(sock: socket.socket, pieces: Sequence[bytes | bytearray | memoryview]) -> None:
    """Sends every piece, in order, with as few `sendmsg` calls as the kernel allows (one, unless
    the socket buffer fills): a head and its payload leave in one syscall without being copied
    into one buffer first."""
    if isinstance(sock, ssl.SSLSocket):   # no sendmsg on TLS: one record per piece
        for piece in pieces:
            sock.sendall(piece)
        return
    views = [memoryview(piece).cast("B") for piece in pieces if len(piece)]
    while views:
        sent = sock.sendmsg(views)
        while views and sent >= len(views[0]):
            sent -= len(views[0])
            views.pop(0)
        if sent:
            views[0] = views[0][sent:]


def send_frame(sock: socket.socket, op: frames.Op, request_id: int, header: DataHeader,
               payload: bytes | bytearray | memoryview | None = None, *, response: bool = False) -> None:
    length = len(payload) if payload is not None else 0
    head = frames.encode(op, request_id, header, length, response=response)
    if payload is not None and length:
        send_all(sock, [head, payload])
    else:
        sock.sendall(head)


def send_frame_from_file(sock: socket.socket, op: frames.Op, request_id: int, header: DataHeader,
                         fd: int, offset: int, count: int) -> None:
    """A response whose payload is `count` bytes of an open file: zero-copy `os.sendfile`."""
    send_head_and_file(sock, frames.encode(op, request_id, header, count, response=True), fd, offset, count)


def send_head_and_file(sock: socket.socket, head: bytes, fd: int, offset: int, count: int) -> None:
    """An encoded frame head, then `count` bytes of an open file as its payload (`os.sendfile`,
    zero copy). The head is corked (MSG_MORE) so it leaves in the payload's first segment: the
    receiver wakes up once for both, not for a 100-byte head and then again for the bytes."""
    sock.sendall(head, socket.MSG_MORE)
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


class RequestReader(HeadReader):
    """A server connection's requests through a ReadAhead buffer, under HeadReader's limits: the
    first recv of a request reads as much as has arrived (a whole head, a small payload, the next
    pipelined requests), the rest of its head comes under the header deadline."""

    def __init__(self, sock: socket.socket, *, wait_s: float, header_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(sock, wait_s=wait_s, header_s=header_s, clock=clock)
        self.ahead = ReadAhead(sock)

    def next_request(self) -> bool:
        """Waits (at most `wait_s`) for the start of the next request: False on EOF before it.
        (ReadAhead's steps written out for its empty-buffer case, the usual one between requests:
        this runs for every request, see take_head.)"""
        ahead = self.ahead
        if ahead._end == ahead._start:
            ahead._start = ahead._end = 0
            try:
                ahead._end = self._sock.recv_into(ahead._view, len(ahead._buffer))
            except BlockingIOError:
                raise Timeout(f"idle for {self._wait_s:g} s") from None
            if not ahead._end:
                return False
        self._deadline = self._clock() + self._header_s if self._header_s > 0 else 0.0
        return True

    def take_head(self, count: int) -> memoryview:
        """`count` bytes of the request's head (what is missing arrives before the header deadline).
        Bytes already buffered (the usual case: the whole head came with the first recv) are
        sliced here without ReadAhead.take's frame."""
        ahead = self.ahead
        start = ahead._start
        if ahead._end - start >= count:
            ahead._start = start + count
            return ahead._view[start:start + count]
        return ahead.take(count, self.more)

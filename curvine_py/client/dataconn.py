"""Blocking data-plane connections to workers: one request at a time per connection, pooled.

Resource handling: a connection that saw a transport error, a timeout or a protocol error is
closed, never returned to the pool (its stream position is unknown). An error *reply* (errno set)
leaves the stream in sync, so that connection is reused (also when it says the worker is
overloaded: a new connection would cost the worker one more file descriptor).

Deadlines: a request may carry an absolute deadline (time.monotonic()). Connecting, the HELLO, the
send and every wait for the worker then last at most what remains of it (a worker that keeps
sending is not cut off mid-payload, one that stalls longer than the remaining time is); without
one, the connection's bulk data timeout bounds each wait. Each step checks the deadline itself;
the waits inside it are bounded by kernel socket timeouts (SO_RCVTIMEO/SO_SNDTIMEO), re-armed only
when what remains falls 5% below the armed value (so a wait may outlast the deadline by that much).
Why kernel timeouts: a Python socket timeout makes every recv and send a poll() plus the call, and
each settimeout() an ioctl: 9 polls and 4 ioctls of a 1 MiB get's 23 syscalls (strace).

TLS: with a context (ConnectionPool(tls=...), rpc/tls.py), every connection is wrapped before its
HELLO; a handshake the worker refuses (wrong CA, no client certificate) is PermissionDenied.
"""
from __future__ import annotations

import contextlib
import itertools
import logging
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from curvine_py.client import digests
from curvine_py.client.buffers import aligned
from curvine_py.core import frames, layout
from curvine_py.core.errors import (
    Busy,
    CurvineError,
    InvalidArgument,
    LocalProtocolError,
    PermissionDenied,
    ProtocolError,
    Timeout,
    Unavailable,
    from_errno,
)
from curvine_py.proto.curvine.v1.data_pb2 import DataHeader
from curvine_py.transport import blocking

log = logging.getLogger(__name__)

# A kernel timeout is re-armed when what remains of a deadline is below this share of the armed one.
REARM_BELOW = 0.95
# Requests of a pipelined batch sent ahead of the reply being read (headers of ~100 bytes: far
# below any socket buffer, so neither side can block the other).
PIPELINE_DEPTH = 8


# The code a reply to each op carries (the op with the response bit).
_REPLY_CODES = {op: int(op) | frames.RESPONSE_BIT for op in frames.Op}
_unpack_prefix = frames.PREFIX.unpack_from


class ReplyStream(blocking.ReadAhead):
    """The client's side of a connection's read-ahead: the head of the reply to one request, and
    a one-chunk payload with its digest.

    Why not ReadAhead.head + a check: a reply that is what was asked for (the common case) is
    checked here with one unpack and a few comparisons on the buffered bytes (decode_prefix builds
    a FramePrefix and looks the op up, two takes slice the buffer: a dozen Python calls per
    request); anything else goes through the full decoder, which raises the precise error."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(sock)
        # Large payloads from another host are hashed aside as they arrive (client/digests.py).
        self._hash_aside = not blocking.is_loopback_peer(sock)

    def reply_head(self, op: frames.Op, request_id: int, max_payload: int) -> tuple[int, DataHeader]:
        """(payload length, header) of the next frame; ProtocolError unless it answers (op,
        request_id), TooLarge for a payload above `max_payload`. The caller then owns the payload."""
        start = self._start
        if self._end - start < frames.PREFIX_SIZE:
            if start == self._end:   # nothing buffered (the usual case): one recv at the front
                self._start = start = 0
                self._end = self.sock.recv_into(self._view, len(self._buffer))
            else:
                self.receive_some()   # EOF or a short read: the full decoder below raises or completes it
                start = self._start
        end = self._end
        if end - start >= frames.PREFIX_SIZE:
            magic, version, code, reply_id, header_length, payload_length = _unpack_prefix(self._buffer, start)
            if code == _REPLY_CODES[op] and reply_id == request_id and magic == frames.MAGIC \
                    and version == frames.VERSION and header_length <= frames.MAX_HEADER \
                    and payload_length <= max_payload \
                    and (not payload_length or op in frames.RESPONSE_PAYLOAD_OPS):
                start += frames.PREFIX_SIZE
                if not header_length:
                    self._start = start
                    return payload_length, DataHeader()
                if end - start < header_length:   # the header came in pieces: take() completes it
                    self._start = start
                    return payload_length, frames.decode_header(self.take(header_length))
                self._start = start + header_length
                header = DataHeader()
                try:
                    header.ParseFromString(bytes(self._view[start:start + header_length]))
                except DecodeError as exc:
                    raise ProtocolError(f"malformed frame header: {exc}") from None
                return payload_length, header
        prefix, header = self.head(max_payload=max_payload, expect_response=True)
        if prefix.op != op or prefix.request_id != request_id:
            raise ProtocolError(f"reply {prefix.op.name}#{prefix.request_id} to {op.name}#{request_id}")
        return prefix.payload_length, header

    def payload_digests(self, target: memoryview) -> list[int]:
        """Fills `target` with the payload (buffered bytes first, then straight from the socket)
        and returns its chunk digests (digests.receive_and_digest). A payload of one chunk, the
        common get, is received and hashed here without another frame."""
        total = len(target)
        if total > digests.CHUNK:
            return digests.receive_and_digest(target, self.read_into, aside=self._hash_aside)
        start = self._start
        got = self._end - start
        if got >= total:   # a small payload that came with the head
            target[:] = self._view[start:start + total]
            self._start = start + total
            return [digests.checksum(target)]
        if got:
            target[:got] = self._view[start:self._end]
            self._start = self._end
        sock = self.sock
        while got < total:
            n = sock.recv_into(target[got:], total - got)
            if not n:
                raise Unavailable(f"connection closed after {got} of {total} bytes")
            got += n
        return [digests.checksum(target)]


@dataclass(frozen=True, slots=True)
class Reply:
    header: DataHeader
    payload: memoryview | None   # the received bytes (a slice of the caller's buffer if given)
    digests: list[int] | None = None   # chunk digests of payload, when asked for (computed while receiving)


def remaining(deadline: float | None, what: str) -> float | None:
    """Seconds left before `deadline` (None: no deadline); Timeout once it has passed."""
    if deadline is None:
        return None
    left = deadline - time.monotonic()
    if left <= 0:
        raise Timeout(f"{what}: deadline passed")
    return left


class WorkerConnection:
    def __init__(self, host: str, port: int, *, token: str, timeout_s: float, max_payload: int,
                 deadline: float | None = None, tls: ssl.SSLContext | None = None) -> None:
        self.address = (host, port)
        self._max_payload = max_payload
        self._timeout_s = timeout_s
        self._ids = itertools.count(1)
        what = f"connect to worker {host}:{port}"
        try:
            left = remaining(deadline, what)
            self._sock = socket.create_connection(self.address, timeout=timeout_s if left is None
                                                  else min(left, timeout_s))
        except TimeoutError:
            raise Timeout(f"{what} timed out") from None
        except OSError as exc:
            # The errno says what happened (ECONNREFUSED: nothing listens there, EHOSTUNREACH...).
            raise Unavailable(f"cannot {what}: {exc.strerror or exc}", errno=exc.errno or None) from None
        blocking.set_fast_options(self._sock)
        # A worker on this host: Reno, as the worker sets on its side (no BBR pacing of puts).
        blocking.set_local_options(self._sock)
        # Plain TCP waits under kernel timeouts (module docstring); TLS keeps Python's (an SSL
        # socket turns a kernel timeout into an SSL error, not a clean EAGAIN).
        self._kernel_timeouts = tls is None
        self._armed = 0.0
        if tls is None:
            self._sock.settimeout(None)
            self._arm(timeout_s)
        if tls is not None:      # the handshake within what is left of the connect's time
            try:
                self._sock = tls.wrap_socket(self._sock)
            except TimeoutError:
                self.close()
                raise Timeout(f"{what}: TLS handshake timed out") from None
            except ssl.SSLError as exc:
                self.close()
                raise PermissionDenied(f"{what}: TLS refused: {exc.reason or exc}") from None
            except OSError as exc:
                self.close()
                raise Unavailable(f"{what}: TLS handshake failed: {exc.strerror or exc}",
                                  errno=exc.errno or None) from None
        self._in = ReplyStream(self._sock)
        try:
            hello = self.request(frames.Op.HELLO, DataHeader(token=token), deadline=deadline)
        except CurvineError:
            self.close()
            raise
        self.worker_id = hello.header.worker_id
        self.epoch = hello.header.epoch

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()

    def request(self, op: frames.Op, header: DataHeader,
                payload: bytes | bytearray | memoryview | None = None,
                out: memoryview | None = None, *, digest: bool = False, deadline: float | None = None) -> Reply:
        """Sends one request and reads its reply. A reply payload lands in `out` when given
        (InvalidArgument if too small, after draining it) or in a new page-aligned buffer. With
        `digest`, the payload's chunk digests are computed as it arrives (digests.py) and returned
        in `Reply.digests`. `deadline`: see the module docstring. An error reply raises its
        CurvineError; one saying the worker lacks resources raises Busy."""
        return Reply(*self.exchange(op, header, payload, out, digest, deadline))

    def exchange(self, op: frames.Op, header: DataHeader, payload: bytes | bytearray | memoryview | None,
                 out: memoryview | None, digest: bool,
                 deadline: float | None) -> tuple[DataHeader, memoryview | None, list[int] | None]:
        """`request` as (reply header, payload or None, its chunk digests when `digest`), without
        the Reply value: the per-request paths (WorkerIO.read and call) use it. Its steps are
        written out, not in helpers (each Python call is a measurable share of a small get;
        bench/kv_profile.py counts them)."""
        request_id = next(self._ids) & frames.MAX_REQUEST_ID
        stream = self._in
        # (try/except rather than a context manager: this runs for every request, and a generator-
        # based context manager costs a dozen Python calls; see _transport_failure.)
        try:
            # One bound for the send and the wait for the head (a request head leaves at once),
            # another for the payload only if it has not arrived with the head.
            if deadline is not None or self._armed != self._timeout_s:
                self._wait_at_most(deadline, op)
            if payload is None:
                self._sock.sendall(frames.encode(op, request_id, header))
            else:
                self._send(op, request_id, header, payload)
            length, reply = stream.reply_head(op, request_id, self._max_payload)
            if not length:
                data = chunk_digests = None
            else:
                # The payload's wait: re-armed only if what remains fell below the armed bound
                # (REARM_BELOW, as _wait_at_most decides; a passed deadline raises there).
                if deadline is not None and length > stream.buffered and (
                        not self._kernel_timeouts or deadline - time.monotonic() < self._armed * REARM_BELOW):
                    self._wait_at_most(deadline, op)
                if out is None:
                    data = aligned(length)
                elif len(out) < length:
                    stream.discard(length)
                    raise InvalidArgument(f"buffer of {len(out)} bytes is too small for {length}")
                else:
                    data = out if len(out) == length else out[:length]
                if digest:
                    chunk_digests = stream.payload_digests(data)
                else:
                    stream.read_into(data)
                    chunk_digests = None
        except Exception as exc:
            failure = self._transport_failure(exc, op)
            if failure is exc:
                raise
            raise failure from None
        finally:
            if deadline is not None and not self._kernel_timeouts:
                self._restore_timeout()
        if reply.errno:
            raise self._error_reply(reply)
        return reply, data, chunk_digests

    def request_many(self, op: frames.Op, headers: list[DataHeader], outs: list[memoryview | None], *,
                     depth: int = PIPELINE_DEPTH, each_s: float | None = None) -> list[Reply | CurvineError]:
        """Payload-less requests pipelined on this connection: up to `depth` are sent ahead of the
        reply being read, so the worker works on the next while this side receives (and digests)
        the previous payload. Replies come back in order; an error reply or a too-small buffer is
        that request's CurvineError in the result, the others still arrive. A transport error,
        timeout or protocol error closes the connection and raises (the stream is lost).
        Why a window, not everything at once: requests sent while the worker is blocked sending
        a large reply we are not reading yet would fill both socket buffers. `each_s`: a deadline
        per reply (from the end of the previous one), so a long batch is not cut short while a
        silent worker still is."""
        if len(headers) != len(outs):
            raise LocalProtocolError(f"{len(headers)} requests but {len(outs)} buffers")
        ids = [next(self._ids) & frames.MAX_REQUEST_ID for _ in headers]
        results: list[Reply | CurvineError] = []
        sent = 0
        try:
            for index, request_id in enumerate(ids):
                deadline = None if each_s is None else time.monotonic() + each_s
                self._wait_at_most(deadline, op)
                ahead = min(len(ids), index + max(1, depth))   # requests index..ahead-1 are out
                if sent < ahead:
                    self._sock.sendall(b"".join(frames.encode(op, ids[i], headers[i]) for i in range(sent, ahead)))
                    sent = ahead
                length, reply = self._in.reply_head(op, request_id, self._max_payload)
                if deadline is not None and length > self._in.buffered:
                    self._wait_at_most(deadline, op)
                try:
                    data, chunk_digests = self._receive_payload(length, outs[index], True)
                except InvalidArgument as exc:     # drained: the stream is in sync
                    results.append(exc)
                    continue
                results.append(Reply(reply, data, chunk_digests) if not reply.errno else self._error_reply(reply))
        except Exception as exc:
            failure = self._transport_failure(exc, op)
            if failure is exc:
                raise
            raise failure from None
        finally:
            if each_s is not None and not self._kernel_timeouts:
                self._restore_timeout()
        return results

    @property
    def where(self) -> str:
        return f"worker {self.address[0]}:{self.address[1]}"

    def _transport_failure(self, exc: Exception, op: frames.Op) -> Exception:
        """What a request raises for `exc`: a transport failure mapped to its CurvineError (Timeout,
        Unavailable), anything else as it is. After a transport failure or a protocol error the
        connection is closed (its stream position is lost)."""
        if isinstance(exc, (TimeoutError, BlockingIOError)):   # BlockingIOError: a kernel timeout
            self.close()
            return Timeout(f"{self.where} did not answer {op.name} in time")
        if isinstance(exc, OSError):
            self.close()
            return Unavailable(f"{self.where}: {exc.strerror or exc}", errno=exc.errno or None)
        if isinstance(exc, (Unavailable, ProtocolError, Timeout)):
            self.close()
        return exc

    def _restore_timeout(self) -> None:
        """A Python-timeout (TLS) socket gets its bulk timeout back after a deadline shortened it."""
        if self._sock.fileno() >= 0:
            self._sock.settimeout(self._timeout_s)

    def _error_reply(self, reply: DataHeader) -> CurvineError:
        error = from_errno(reply.errno, reply.message)
        return Busy(f"{self.where} is busy: {reply.message}", errno=reply.errno) if isinstance(error, Busy) else error

    def _wait_at_most(self, deadline: float | None, op: frames.Op) -> None:
        """Bounds the next blocking step by what remains of the deadline (without one: by the bulk
        timeout); Timeout once it has passed."""
        if deadline is None:
            if self._kernel_timeouts and self._armed != self._timeout_s:
                self._arm(self._timeout_s)
            return
        left = deadline - time.monotonic()
        if left <= 0:
            raise Timeout(f"{op.name} to worker {self.address[0]}:{self.address[1]}: deadline passed")
        want = min(left, self._timeout_s)
        if not self._kernel_timeouts:
            self._sock.settimeout(want)
        elif want < self._armed * REARM_BELOW or want > self._armed:
            self._arm(want)

    def _arm(self, seconds: float) -> None:
        blocking.set_recv_timeout(self._sock, seconds)
        blocking.set_send_timeout(self._sock, seconds)
        self._armed = seconds

    def _send(self, op: frames.Op, request_id: int, header: DataHeader,
              payload: bytes | bytearray | memoryview | None) -> None:
        """A request frame; with `header.digest_trailer` the payload's chunk digests are computed
        as it goes out and sent after it (frames.py)."""
        if payload is None or not header.digest_trailer:
            blocking.send_frame(self._sock, op, request_id, header, payload)
            return
        view = memoryview(payload).cast("B")
        length = len(view)
        if header.length != length:
            raise LocalProtocolError(f"digest trailer: length {header.length} != payload of {length} bytes")
        head = frames.encode(op, request_id, header, length + frames.trailer_size(length))
        if 0 < length <= layout.CHUNK_SIZE and self._kernel_timeouts:
            # One chunk (most puts), plain TCP: one hash, one sendmsg of head, bytes and trailer,
            # without send_all's list of casts; only a send cut short takes the general path.
            trailer = frames.encode_trailer([layout.checksum(view)])
            whole: list[bytes | memoryview] = [head, view, trailer]
            sent = self._sock.sendmsg(whole)
            if sent < len(head) + length + len(trailer):
                blocking.send_all(self._sock, _unsent(whole, sent))
            return
        # Each chunk is hashed right before it goes (still in cache); the head leaves with the first
        # chunk and the trailer with the last, one sendmsg each (a 1 MiB put: one syscall).
        chunk_digests: list[int] = []
        for start in range(0, length, layout.CHUNK_SIZE):
            piece = view[start:start + layout.CHUNK_SIZE]
            chunk_digests.append(layout.checksum(piece))
            pieces: list[bytes | memoryview] = [head, piece] if start == 0 else [piece]
            if start + layout.CHUNK_SIZE >= length:
                pieces.append(frames.encode_trailer(chunk_digests))
            blocking.send_all(self._sock, pieces)
        if not length:
            blocking.send_all(self._sock, [head, frames.encode_trailer(chunk_digests)])

    def _receive_payload(self, length: int, out: memoryview | None,
                         digest: bool) -> tuple[memoryview | None, list[int] | None]:
        if not length:
            return None, None
        if out is not None and len(out) < length:
            self._in.discard(length)
            raise InvalidArgument(f"buffer of {len(out)} bytes is too small for {length}")
        target = out[:length] if out is not None else aligned(length)
        if not digest:
            self._in.read_into(target)
            return target, None
        return target, self._in.payload_digests(target)


def _unsent(pieces: list[bytes | memoryview], sent: int) -> list[bytes | memoryview]:
    """What is left of `pieces` after the first `sent` bytes went out."""
    rest: list[bytes | memoryview] = []
    for piece in pieces:
        if sent >= len(piece):
            sent -= len(piece)
            continue
        rest.append(memoryview(piece)[sent:] if sent else piece)
        sent = 0
    return rest


class ConnectionPool:
    """Idle connections per worker address, created on demand, at most `per_worker` kept idle."""

    def __init__(self, *, token: str, timeout_s: float, max_payload: int, per_worker: int = 4,
                 tls: ssl.SSLContext | None = None) -> None:
        self._token, self._timeout_s, self._max_payload = token, timeout_s, max_payload
        self._tls = tls
        self._per_worker = per_worker
        self._idle: dict[tuple[str, int], list[WorkerConnection]] = {}
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def connection(self, host: str, port: int, deadline: float | None = None) -> Iterator[WorkerConnection]:
        """A pooled connection (a new one, connected within `deadline`, when none is idle)."""
        conn = self.acquire(host, port, deadline)
        try:
            yield conn
        except BaseException as exc:
            self.release(conn, exc)
            raise
        self.release(conn)

    def acquire(self, host: str, port: int, deadline: float | None = None) -> WorkerConnection:
        """`connection` without the context manager (for the per-request path): hand it back
        with `release`, whatever happens."""
        with self._lock:
            idle = self._idle.get((host, port))
            conn = idle.pop() if idle else None
        if conn is None:
            conn = WorkerConnection(host, port, token=self._token, timeout_s=self._timeout_s,
                                    max_payload=self._max_payload, deadline=deadline, tls=self._tls)
        return conn

    def release(self, conn: WorkerConnection, error: BaseException | None = None) -> None:
        """Back to the pool after a success or an error reply (Busy included: the stream is in
        sync); closed after a transport failure, a protocol error or anything unexpected."""
        if error is None or isinstance(error, Busy) or (
                isinstance(error, CurvineError) and not isinstance(error, (Unavailable, Timeout, ProtocolError))):
            with self._lock:
                idle = self._idle.get(conn.address)
                if idle is None:
                    idle = self._idle[conn.address] = []
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

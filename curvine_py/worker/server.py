"""The worker's data-plane server: framed requests (core/frames.py) on blocking sockets, one thread
per connection (every socket and file syscall releases the GIL, so connections overlap well).

Wire behaviour per op (request fields -> reply fields; every reply carries the request's op with
the response bit and its request id; `errno` 0 = success):

    HELLO         token -> worker_id, epoch. Wrong token (worker has one): EACCES, then close.
                  Required first when the worker has a token (any other first op: EACCES, close).
    PUT           key, payload, [length = payload length], [checksum], user_meta, storage_class
                  (unspecified = CACHE), ttl_ms, [epoch], [digest_trailer: the payload ends with
                  the chunk digests of the `length` bytes before it, each verified before the
                  object is published] -> length, found (true = the key was
                  already stored: write-once, the stored copy is kept, the payload is dropped).
                  EINVAL/ENAMETOOLONG bad key, ENOSPC no room (after evicting cache data),
                  EIO payload does not match `checksum` or its trailer, ESTALE stale epoch.
    GET           key, [epoch] -> found=false (a miss, not an error) | found, length, checksum,
                  user_meta, chunk_checksums (all chunks) + payload. A stored file under the key's
                  name that holds another key's object is a miss, dropped as corrupt.
    EXISTS        keys, pin, [epoch] -> hit_count (length of the stored prefix of keys).
    DELETE        key, [epoch] -> found.
    WRITE_BLOCK   block_id, payload, [length], [checksum], storage_class (unspecified = DURABLE),
                  ttl_ms, [digest_trailer as PUT] -> length, checksum. An existing block id is replaced atomically.
    READ_BLOCK    block_id, offset, length (0 = to the end; clipped at the end), [checksum: the
                  master's record of the whole block] -> offset, length
                  (bytes sent), checksum (of the whole block), chunk_checksums (of the payload cut
                  in 1 MiB pieces from its start; offsets should be chunk-aligned) + payload.
                  ENOENT absent, EINVAL offset past the end, EIO stored bytes fail their checksum,
                  or the stored header names another block or a checksum other than the request's
                  (the copy is dropped and reported bad).
    DELETE_BLOCK  block_id -> found.
    REPORT_BAD    key, or block_id [checksum] when key is empty -> found (true = the copy failed
                  re-verification and was dropped; a good copy is kept).
    SCRUB         key, or block_id [checksum] when key is empty -> found (false: no copy here), length,
                  checksum of the copy, re-read and verified chunk by chunk (scrub.py). EIO: it
                  failed (dropped; a block is reported bad with the next heartbeat). For fsck --scrub.
    SCRUB_KV      key (cursor: the stored name to continue after, "" = from the start), length (byte
                  budget, 0 = 256 MiB), offset (verified bytes/s, 0 = unlimited) -> key (next cursor),
                  found (true: the walk is done), length (bytes verified), hit_count (objects
                  verified), keys (keys of the corrupt copies, dropped). scrubkv.py; fsck --scrub.
    PING          -> (errno 0).

Short-circuit connections (unix socket, shortcircuit.py) answer GET and READ_BLOCK with the same
reply header plus `data_offset` (where the range starts in the file) and the open file descriptor
(SCM_RIGHTS) instead of payload bytes; every other op behaves as on TCP.

Time limits (SessionOptions, limits.py): a connection silent for `idle_timeout_s` between requests
is closed; a started request head (prefix + header) must be complete within `header_timeout_s`;
with a token, HELLO must succeed within `auth_timeout_s` of the accept; a payload or a reply that
makes no progress for `idle_timeout_s` ends the connection. Each is closed without a reply.

Error handling: a request that fails cleanly gets an error reply (errno, message) and the
connection goes on (an unread payload is drained first). Garbage from the peer (bad magic, unknown
op, malformed header: ProtocolError) gets an error reply if possible and that connection is closed.
A payload above max_payload gets EFBIG *before* any payload byte is read, then close. A bug in a
handler is logged, answered EIO, and closes only that connection; other connections never notice.
A worker out of file descriptors answers EAGAIN (`Busy`), so the client tries the next replica or
misses. Repeated errors are logged rate-limited.

Metrics (observe/metrics.py, the families of `WorkerState.metrics`): every request's duration by op
(`get`, `write_block`...: from its header to its reply sent), every error answered by errno name,
KV lookups as way `kv` (GET: a hit or a miss; EXISTS: each key of the stored prefix a hit, the
first absent key a miss, the check stops there), KV payload bytes received (PUT) and sent over the
socket (GET on TCP; a short-circuit reply passes an fd, no bytes), and open connections per
listener (`data`, `shortcircuit`). These are what this worker's store answered, whoever asked: the
lm:// server's forwarded lookups land here too (the `lm` way counts them once more, as asked).
"""
from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from curvine_py.core import frames
from curvine_py.core.errors import (
    Busy,
    Corrupt,
    CurvineError,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ProtocolError,
    StaleEpoch,
    Timeout,
    TooLarge,
    Unavailable,
)
from curvine_py.observe.local import HistogramChild
from curvine_py.proto.curvine.v1.data_pb2 import DataHeader
from curvine_py.rpc.auth import token_matches
from curvine_py.transport import blocking
from curvine_py.worker.connwrap import TlsConnections, profiled, tls_handler
from curvine_py.worker.limits import UNBOUNDED, ConnectionGate, ServerLimits
from curvine_py.worker.listener import ConnectionHandler, Listener, bind_tcp
from curvine_py.worker.refuser import Refuser, error_frame
from curvine_py.worker.scrub import Verdict, scrub
from curvine_py.worker.scrubkv import scrub_page
from curvine_py.worker.store import Store
from curvine_py.worker.storedfile import StoredFile
from curvine_py.worker.throttle import LogThrottle, log_throttled
from curvine_py.worker.workerstate import SessionOptions, WorkerState

log = logging.getLogger(__name__)

# Small payloads go out in one send with their header (one segment, one syscall less); large ones
# by sendfile (zero copy).
INLINE_PAYLOAD = 64 * 1024
HANDSHAKE_S = 10.0     # a TLS handshake's bound when no auth deadline is set
OUT_OF_FDS = (errno.EMFILE, errno.ENFILE)
# One throttle for every session of the process: the same failure on many connections is one story.
_throttle = LogThrottle()
_GET = frames.Op.GET
_GET_CODE = int(_GET) | frames.RESPONSE_BIT
_GET_REPLY = "get-reply"       # StoredFile.memo: the encoded header of a GET's reply
_MISS = DataHeader(found=False)


def _found(stored: StoredFile) -> DataHeader:
    """The reply header of a GET that found `stored`."""
    meta = stored.header
    return DataHeader(found=True, length=meta.length, checksum=meta.checksum, user_meta=meta.user_meta,
                      chunk_checksums=meta.chunk_checksums)


def _log_throttled(kind: str, level: int, message: str, *args: object, exc_info: bool = False) -> None:
    log_throttled(log, _throttle, kind, level, message, *args, exc_info=exc_info)


@dataclass(slots=True)
class _Outcome:
    header: DataHeader
    stored: StoredFile | None = None   # payload source: stored[data_offset + offset, +length)
    offset: int = 0
    length: int = 0


class _PeerGone(Exception):
    """The socket failed while a payload was being received: the stream is lost."""


class Session:
    """One client connection: reads frames, answers them in order, until EOF or garbage."""

    def __init__(self, sock: socket.socket, store: Store, state: WorkerState, options: SessionOptions,
                 peer: str) -> None:
        self._sock = sock
        self._store = store
        self._state = state
        self._options = options
        self._peer = peer
        self._authenticated = not options.token
        self._auth_deadline = time.monotonic() + options.auth_timeout_s \
            if options.token and options.auth_timeout_s else 0.0
        self._head = blocking.RequestReader(sock, wait_s=self._wait_s(), header_s=options.header_timeout_s)
        blocking.set_send_timeout(sock, options.idle_timeout_s)
        self._unread = 0          # payload bytes of the current request not yet consumed
        self._metrics = state.metrics
        self._tally = state.tallies.open()    # closed (folded) in serve
        self._latency: dict[frames.Op, HistogramChild] = {}   # this session's parts (state.latency_part)
        self._tls = isinstance(sock, ssl.SSLSocket)       # no sendfile, no sendmsg
        self._plain = not self._tls and not options.pass_fds   # GET answered by _answer_get
        self._close_after = False
        self._handlers: dict[frames.Op, Callable[[frames.FramePrefix, DataHeader], _Outcome]] = {
            frames.Op.HELLO: self._hello,
            frames.Op.PUT: self._put,
            frames.Op.GET: self._get,
            frames.Op.EXISTS: self._exists,
            frames.Op.DELETE: self._delete,
            frames.Op.WRITE_BLOCK: self._write_block,
            frames.Op.READ_BLOCK: self._read_block,
            frames.Op.DELETE_BLOCK: self._delete_block,
            frames.Op.REPORT_BAD: self._report_bad,
            frames.Op.PING: self._ping,
            frames.Op.SCRUB: self._scrub,
            frames.Op.SCRUB_KV: self._scrub_kv,
        }

    def _wait_s(self) -> float:
        """How long the next request may take to start: the idle timeout, or what is left of the
        authentication deadline (at least a millisecond: 0 would mean forever)."""
        if self._authenticated or not self._auth_deadline:
            return self._options.idle_timeout_s
        left = max(0.001, self._auth_deadline - time.monotonic())
        return min(left, self._options.idle_timeout_s) if self._options.idle_timeout_s else left

    def serve(self) -> None:
        try:
            while self._one_request():
                pass
        except Timeout as exc:
            if "idle" in exc.message and self._authenticated:
                log.debug("closing connection from %s: %s", self._peer, exc)
            else:
                _log_throttled("timeout", logging.INFO, "closing connection from %s: %s%s", self._peer, exc,
                               "" if self._authenticated else " (not authenticated)")
        except (OSError, Unavailable, _PeerGone) as exc:
            log.debug("connection from %s ended: %s", self._peer, exc)
        except CurvineError as exc:   # e.g. a stored file shorter than its header while sending it
            _log_throttled("dropped", logging.WARNING, "connection from %s dropped: %s", self._peer, exc)
        except Exception:  # noqa: BLE001 (a bug ends only this connection; logged with its traceback)
            _log_throttled("failed", logging.ERROR, "connection from %s failed", self._peer, exc_info=True)
        finally:
            self._state.tallies.close(self._tally)
            for part in self._latency.values():
                self._state.retire_latency(part)
            # FIN right after the last reply; unread request bytes (a refused payload) may still
            # make the kernel answer with RST, which is fine: the reply went out first.
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_WR)
            with contextlib.suppress(OSError):
                self._sock.close()

    # -- framing -----------------------------------------------------------------------------------

    def _one_request(self) -> bool:
        """Serves one request; False = close the connection. (The steps are written out here, not
        in helpers: this runs for every request, and each Python call is a measurable share of a
        small request's cost; bench/kv_profile.py counts them.)"""
        head = self._head
        if not self._authenticated:   # once authenticated, the idle timeout stays armed
            head.wait_s = self._wait_s()
        if not head.next_request():
            return False   # clean close between requests
        raw = head.take_head(frames.PREFIX_SIZE)   # a view, valid until the next read
        try:
            prefix = frames.decode_prefix(raw, max_payload=self._options.max_payload, expect_response=False)
        except (TooLarge, ProtocolError) as exc:
            # Refused before reading anything more: an oversized payload is never read or buffered.
            _, _, code, request_id, _, _ = frames.PREFIX.unpack(raw)
            _log_throttled("garbage", logging.WARNING, "refusing frame from %s: %s", self._peer, exc)
            self._send_raw_error(code, request_id, exc)
            return False
        try:
            header = frames.decode_header(head.take_head(prefix.header_length)) if prefix.header_length \
                else DataHeader()
        except ProtocolError as exc:
            _log_throttled("garbage", logging.WARNING, "malformed header from %s: %s", self._peer, exc)
            self._send_error(prefix, exc)
            return False
        if not self._authenticated and prefix.op != frames.Op.HELLO:
            self._send_error(prefix, PermissionDenied("authenticate with HELLO first"))
            return False
        self._unread = prefix.payload_length
        latency = self._latency.get(prefix.op)
        if latency is None:
            latency = self._latency[prefix.op] = self._state.latency_part(prefix.op)
        start = time.perf_counter()
        try:
            return self._answer(prefix, header)
        finally:
            latency.observe(time.perf_counter() - start)

    def _answer(self, prefix: frames.FramePrefix, header: DataHeader) -> bool:
        """Runs the handler of a request read and sends its reply; False = close the connection."""
        if prefix.op is _GET and self._plain:
            return self._answer_get(prefix, header)
        try:
            outcome = self._handlers[prefix.op](prefix, header)
        except Exception as exc:  # noqa: BLE001 (each kind answered as _failed says)
            return self._failed(prefix, exc)
        if self._unread:
            self._drain()
        stored = outcome.stored
        if stored is None:
            blocking.send_frame(self._sock, prefix.op, prefix.request_id, outcome.header, response=True)
        else:
            self._send_stored(prefix, outcome, stored)
            if prefix.op == frames.Op.GET and not self._options.pass_fds:
                self._tally.sent += outcome.length
        return not self._close_after

    def _answer_get(self, prefix: frames.FramePrefix, header: DataHeader) -> bool:
        """A GET on plain TCP: `_get` and `_send_stored` written out (every KV read runs this; each
        Python call is a measurable share of its fixed cost, bench/kv_profile.py), with the reply's
        header encoded once per cached file (StoredFile.memo). Same answers, same errors."""
        try:
            stored = self._open_for_get(header)
        except Exception as exc:  # noqa: BLE001 (each kind answered as _failed says)
            return self._failed(prefix, exc)
        if stored is None:
            self._sock.sendall(frames.encode(_GET, prefix.request_id, _MISS, response=True))
            return not self._close_after
        try:
            length = stored.header.length
            body = stored.memo.get(_GET_REPLY)
            if body is None:
                body = stored.memo[_GET_REPLY] = _found(stored).SerializeToString()
            head = frames.PREFIX.pack(frames.MAGIC, frames.VERSION, _GET_CODE, prefix.request_id, len(body),
                                      length) + body
            if length > INLINE_PAYLOAD:
                blocking.send_head_and_file(self._sock, head, stored.fd, stored.data_offset, length)
            else:
                self._send_inline(head, stored, 0, length)
        finally:
            stored.close()
        self._tally.sent += length
        return not self._close_after

    def _failed(self, prefix: frames.FramePrefix, exc: Exception) -> bool:
        """The answer to a request whose handler raised `exc` (called from its except clause):
        False = close the connection. A lost stream (the peer gone, garbage) is raised again."""
        if isinstance(exc, CurvineError):
            if isinstance(exc, (Unavailable, ProtocolError)):
                raise exc
            self._drain()
            self._send_error(prefix, exc)
            return not self._close_after
        if isinstance(exc, _PeerGone):
            raise exc
        if isinstance(exc, OSError):   # the local disk failed (EIO, EROFS...): an answer, not a crash
            self._drain()
            if exc.errno in OUT_OF_FDS:   # the client tries the next replica or misses
                _log_throttled("fds", logging.ERROR, "%s for %s: out of file descriptors", prefix.op.name,
                               self._peer)
                self._send_error(prefix, Busy(f"worker out of file descriptors: {exc}"))
            else:
                _log_throttled(f"os:{exc.errno}", logging.ERROR, "%s for %s failed: %s", prefix.op.name,
                               self._peer, exc)
                self._send_error(prefix, CurvineError(str(exc), errno=exc.errno or errno.EIO))
            return True
        # A bug: answered EIO, logged with its traceback (we are inside the handler's except clause).
        _log_throttled("internal", logging.ERROR, "internal error serving %s to %s", prefix.op.name, self._peer,
                       exc_info=True)
        self._send_error(prefix, CurvineError(f"internal error: {exc}"))
        return False

    def _drain(self) -> None:
        if self._unread:
            self._head.ahead.discard(self._unread)
            self._unread = 0

    def _fill(self, view: memoryview) -> None:
        try:
            self._head.ahead.read_into(view)
        except (OSError, Unavailable) as exc:
            raise _PeerGone(str(exc)) from None
        self._unread -= len(view)

    def _send_stored(self, prefix: frames.FramePrefix, outcome: _Outcome, stored: StoredFile) -> None:
        """A reply whose payload is a stored file's bytes (closed afterwards, whatever happens)."""
        op, request_id, header = prefix.op, prefix.request_id, outcome.header
        try:
            if self._options.pass_fds:
                header.data_offset = stored.data_offset + outcome.offset
                frame = frames.encode(op, request_id, header, response=True)
                sent = socket.send_fds(self._sock, [frame], [stored.fd])
                if sent < len(frame):
                    self._sock.sendall(frame[sent:])
            elif outcome.length <= INLINE_PAYLOAD or self._tls:
                # (On TLS, sendfile would put plaintext on the wire: the bytes are read and sent.)
                self._send_inline(frames.encode(op, request_id, header, outcome.length, response=True), stored,
                                  outcome.offset, outcome.length)
            else:
                blocking.send_frame_from_file(self._sock, op, request_id, header, stored.fd,
                                              stored.data_offset + outcome.offset, outcome.length)
        finally:
            stored.close()

    def _send_inline(self, frame: bytes, stored: StoredFile, offset: int, length: int) -> None:
        """A reply head and `length` stored bytes read with one `pread`, sent together."""
        payload = os.pread(stored.fd, length, stored.data_offset + offset)
        if len(payload) != length:   # a short read of a regular file: it ended early, or a big one
            payload = stored.read(offset, length)
            if len(payload) != length:
                raise Corrupt("stored file is shorter than its header says")
        if self._tls:
            blocking.send_all(self._sock, [frame, payload])
        else:   # head and bytes in one sendmsg (the rest, in the rare case it was cut short)
            sent = self._sock.sendmsg([frame, payload])
            if sent < len(frame) + length:
                blocking.send_all(self._sock, [memoryview(frame + payload)[sent:]])

    def _send_error(self, prefix: frames.FramePrefix, exc: CurvineError) -> None:
        self._send_raw_error(int(prefix.op), prefix.request_id, exc)

    def _send_raw_error(self, code: int, request_id: int, exc: CurvineError) -> None:
        self._metrics.errors.record(exc)   # every error answered passes here, counted by errno name
        with contextlib.suppress(OSError):
            self._sock.sendall(error_frame(code, request_id, exc))

    # -- handlers ----------------------------------------------------------------------------------

    def _check_epoch(self, header: DataHeader) -> None:
        if header.epoch and header.epoch < self._state.epoch:
            raise StaleEpoch(f"epoch {header.epoch} is older than the worker's {self._state.epoch}")

    @staticmethod
    def _payload_length(prefix: frames.FramePrefix, header: DataHeader) -> int:
        """The object's length (without a digest trailer, if the payload carries one)."""
        return frames.object_length(header, prefix.payload_length)

    def _trailer(self, header: DataHeader, length: int) -> Callable[[], tuple[int, ...]] | None:
        """Reads the digest trailer (after the object's bytes), when the request has one."""
        if not header.digest_trailer:
            return None

        def read() -> tuple[int, ...]:
            raw = memoryview(bytearray(frames.trailer_size(length)))
            self._fill(raw)
            return frames.decode_trailer(raw, length)
        return read

    def _hello(self, prefix: frames.FramePrefix, header: DataHeader) -> _Outcome:
        if not token_matches(self._options.token, header.token):
            self._close_after = True
            raise PermissionDenied("wrong token")
        self._authenticated = True
        self._head.wait_s = self._wait_s()
        return _Outcome(DataHeader(worker_id=self._state.worker_id, epoch=self._state.epoch))

    def _ping(self, prefix: frames.FramePrefix, header: DataHeader) -> _Outcome:
        return _Outcome(DataHeader())

    def _put(self, prefix: frames.FramePrefix, header: DataHeader) -> _Outcome:
        length = self._payload_length(prefix, header)
        self._check_epoch(header)
        pending = self._store.begin_put(header.key, length, checksum=header.checksum,
                                        user_meta=header.user_meta, storage_class=header.storage_class,
                                        ttl_ms=header.ttl_ms)
        if pending is None:
            return _Outcome(DataHeader(length=length, found=True))
        with pending:
            pending.receive(self._fill, self._trailer(header, length))
            stored_now = pending.commit()
        self._tally.received += length
        return _Outcome(DataHeader(length=length, found=not stored_now))

    def _get(self, prefix: frames.FramePrefix, header: DataHeader) -> _Outcome:
        """GET on a short-circuit or TLS connection (plain TCP: _answer_get)."""
        stored = self._open_for_get(header)
        if stored is None:
            return _Outcome(DataHeader(found=False))
        return _Outcome(_found(stored), stored, 0, stored.header.length)

    def _open_for_get(self, header: DataHeader) -> StoredFile | None:
        """The stored object a GET asks for, open, counted as a hit; None = a miss (counted)."""
        if header.epoch and header.epoch < self._state.epoch:
            self._check_epoch(header)
        try:
            stored = self._store.open_object(header.key)
        except Corrupt:
            # Bad bytes are never returned: for a KV object that is a miss, and the copy goes.
            self._store.drop_bad(self._store.object_name(header.key))
            stored = None
        if stored is None:
            self._tally.misses += 1
            return None
        self._tally.hits += 1
        return stored

    def _exists(self, prefix: frames.FramePrefix, header: DataHeader) -> _Outcome:
        self._check_epoch(header)
        hit_count = self._store.exists(header.keys, pin=header.pin)
        if hit_count:
            self._metrics.access.hits.labels(way="kv").inc(hit_count)
        if hit_count < len(header.keys):
            self._metrics.access.lookup("kv", False)   # the first absent key; the check stops there
        return _Outcome(DataHeader(hit_count=hit_count))

    def _delete(self, prefix: frames.FramePrefix, header: DataHeader) -> _Outcome:
        self._check_epoch(header)
        return _Outcome(DataHeader(found=self._store.delete_object(header.key)))

    def _write_block(self, prefix: frames.FramePrefix, header: DataHeader) -> _Outcome:
        length = self._payload_length(prefix, header)
        with self._store.begin_write_block(header.block_id, length, checksum=header.checksum,
                                           storage_class=header.storage_class,
                                           ttl_ms=header.ttl_ms) as pending:
            pending.receive(self._fill, self._trailer(header, length))
            pending.commit()
        return _Outcome(DataHeader(block_id=header.block_id, length=length))

    def _read_block(self, prefix: frames.FramePrefix, header: DataHeader) -> _Outcome:
        try:
            stored = self._store.open_block(header.block_id, header.checksum)
        except Corrupt:   # an unreadable header, or another block's copy (dropped already)
            self._store.drop_bad(self._store.block_name(header.block_id))
            raise
        if stored is None:
            raise NotFound(f"block {header.block_id:x} is not on this worker")
        try:
            size = stored.header.length
            if header.offset > size:
                raise InvalidArgument(f"offset {header.offset} is past the end of block {header.block_id:x} "
                                      f"({size} bytes)")
            rest = size - header.offset
            count = min(header.length, rest) if header.length else rest
            try:
                digests = stored.range_digests(header.offset, count)
            except Corrupt:
                self._store.drop_bad(self._store.block_name(header.block_id), stored)
                raise
        except BaseException:
            stored.close()
            raise
        reply = DataHeader(block_id=header.block_id, offset=header.offset, length=count,
                           checksum=stored.header.checksum, chunk_checksums=digests)
        return _Outcome(reply, stored, header.offset, count)

    def _delete_block(self, prefix: frames.FramePrefix, header: DataHeader) -> _Outcome:
        return _Outcome(DataHeader(found=self._store.delete_block(header.block_id)))

    def _scrub(self, prefix: frames.FramePrefix, header: DataHeader) -> _Outcome:
        name = self._store.object_name(header.key) if header.key else self._store.block_name(header.block_id)
        result = scrub(self._store, name, checksum=0 if header.key else header.checksum)
        if result.verdict is Verdict.CORRUPT:
            raise Corrupt(f"{name} failed verification and was dropped: {result.reason}")
        return _Outcome(DataHeader(key=header.key, block_id=header.block_id,
                                   found=result.verdict is Verdict.GOOD, length=result.length,
                                   checksum=result.checksum))

    def _scrub_kv(self, prefix: frames.FramePrefix, header: DataHeader) -> _Outcome:
        page = scrub_page(self._store, header.key, budget=header.length, rate=header.offset)
        return _Outcome(frames.scrub_kv_reply(page))

    def _report_bad(self, prefix: frames.FramePrefix, header: DataHeader) -> _Outcome:
        if header.key:
            dropped = self._store.report_bad_object(header.key)
        else:
            dropped = self._store.report_bad_block(header.block_id, header.checksum)
        return _Outcome(DataHeader(found=dropped))


def session_handler(store: Store, state: WorkerState, options: SessionOptions) -> ConnectionHandler:
    """Serves one data-plane connection (TCP or short-circuit) until EOF or garbage. With
    `options.profile_dir` set (WorkerConfig.profile_dir), each connection runs under cProfile and
    leaves its stats in that directory when it ends (bench/kv_profile.py reads them)."""
    listener: Literal["data", "shortcircuit"] = "shortcircuit" if options.pass_fds else "data"
    profile_dir = options.profile_dir

    def serve(conn: socket.socket, peer: str) -> None:
        with state.metrics.connections.held(listener):
            session = Session(conn, store, state, options, peer)
            if profile_dir:
                profiled(session.serve, profile_dir, listener)
            else:
                session.serve()
    return serve


class DataServer:
    """The TCP data plane. `start()` binds (port 0 = any) and returns the bound (host, port).
    Connections over the caps of `gate` are answered by `refuser` (both shared by the worker's
    servers; without them nothing is capped)."""

    def __init__(self, store: Store, state: WorkerState, *, host: str, port: int, token: str,
                 max_payload: int, limits: ServerLimits | None = None, gate: ConnectionGate | None = None,
                 refuser: Refuser | None = None, tls: ssl.SSLContext | None = None) -> None:
        self._store = store
        self._tls = tls
        self._tls_live = TlsConnections()
        self._state = state
        self._host = host
        self._port = port
        self._options = SessionOptions.bounded(token, max_payload, limits or UNBOUNDED)
        self._gate = gate
        self._refuser = refuser
        self._listener: Listener | None = None
        self.address: tuple[str, int] = (host, port)

    def start(self) -> tuple[str, int]:
        sock = bind_tcp(self._host, self._port)
        self.address = (self._host, sock.getsockname()[1])
        handler = session_handler(self._store, self._state, self._options)
        if self._tls is not None:
            handler = tls_handler(self._tls, handler, self._options.auth_timeout_s or HANDSHAKE_S, self._tls_live)
        self._listener = Listener(sock, handler, "data",
                                  gate=self._gate, refuse=self._refuser.refuse if self._refuser else None)
        self._listener.start()
        log.info("data plane listening on %s:%d", *self.address)
        return self.address

    def stop(self) -> None:
        if self._listener is not None:
            self._listener.stop()
            self._listener = None
        self._tls_live.shutdown_all()


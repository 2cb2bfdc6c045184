"""LMCache's `lm://` server protocol on a worker port, so a stock LMCache engine (`remote_url:
lm://<worker>:<port>`) uses the cluster with nothing installed next to vLLM.

Every key is routed to its owner worker by the same rendezvous placement as the native client
(this worker may forward over the data plane), so all `lm://` ports of a cluster see one shared
store, interchangeable with the native plugin (both keep LMCache's 28-byte RemoteMetadata with each
object). Byte layout and client quirks: core/lmproto.py.

Latency rules from the stock client: it reads each reply header with one recv(36), so the header
and payload leave in one `sendmsg`; TCP_NODELAY is set and TCP_QUICKACK re-armed after each read
(the client's next request must not wait for a delayed ACK). PUT has no reply: a failed PUT is
logged and the key simply stays a miss.

Limits (limits.py): the port's connections count against the worker's caps (one over a cap is
closed at once: the protocol has no error reply), a connection silent for the idle timeout is
closed, and a started 36-byte request head must be complete within the header timeout.

Error handling: garbage (ProtocolError) or a PUT above the payload limit (TooLarge) closes that
connection (the protocol has no request ids to resynchronise); other connections are unaffected.

Buffers: each session keeps one page-aligned buffer and receives every PUT payload and GET object
into it (a connection is strictly serial, and LMCache's objects of one model all have one size).
A fresh 32 MiB mmap per request costs ~8k page faults, more than the copy itself (bench lmcache).

Metrics (the worker's families, observe/metrics.py): lookups as way `lm` (GET: hit or miss; EXIST:
hit or miss; a failed lookup answered as a miss counts as a miss and its error by errno name),
payload bytes received (PUT) and sent (GET hits), the duration per op (`lm_put`, `lm_get`,
`lm_exist`: from the request head to the reply sent), and the open connections of listener `lm`.
"""
from __future__ import annotations

import logging
import socket
import time

from prometheus_client import CollectorRegistry

from curvine_py.client.buffers import aligned
from curvine_py.client.kv import KVClient
from curvine_py.core import lmproto
from curvine_py.core.errors import (
    CurvineError,
    InvalidArgument,
    PermissionDenied,
    ProtocolError,
    Timeout,
    TooLarge,
    Unavailable,
)
from curvine_py.observe.metrics import WorkerMetrics, register_worker
from curvine_py.transport.blocking import HeadReader, recv_exactly_into, set_send_timeout
from curvine_py.worker.limits import UNBOUNDED, ConnectionGate, ServerLimits
from curvine_py.worker.listener import Listener, bind_tcp
from curvine_py.worker.lmauth import LocalUsers, PeerFilter
from curvine_py.worker.throttle import LogThrottle, log_throttled

log = logging.getLogger(__name__)
# Per-request failures (an owner worker down: every put and get fails) are logged rate-limited.
_throttle = LogThrottle()


def _quickack(sock: socket.socket) -> None:
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
    except OSError:
        pass


def stored_meta(user_meta: bytes, length: int) -> lmproto.ObjectMeta:
    """The descriptor to echo on a GET hit; objects stored without one (e.g. by `curvine-py kv`)
    are described as raw bytes of their length."""
    if len(user_meta) == lmproto.DESCRIPTOR_SIZE:
        try:
            meta = lmproto.ObjectMeta.unpack(user_meta)
        except ProtocolError:
            pass
        else:
            if meta.length == length:
                return meta
    return lmproto.ObjectMeta(length, lmproto.MemoryFormat.BINARY, lmproto.Dtype.UINT8, (length, 0, 0, 0))


# The duration label of each timed command (HEALTH and LIST are not operations on the cache).
_OPS = {lmproto.Command.PUT: "lm_put", lmproto.Command.GET: "lm_get", lmproto.Command.EXIST: "lm_exist"}


class LmSession:
    """One `lm://` client connection (LMCache opens one per engine process and talks serially)."""

    def __init__(self, sock: socket.socket, kv: KVClient, *, max_payload: int, peer: str,
                 limits: ServerLimits = UNBOUNDED, metrics: WorkerMetrics | None = None) -> None:
        self._sock = sock
        self._metrics = metrics or register_worker(CollectorRegistry())
        self._head = HeadReader(sock, wait_s=limits.idle_timeout_s, header_s=limits.header_timeout_s)
        set_send_timeout(sock, limits.idle_timeout_s)
        self._kv = kv
        self._max_payload = min(max_payload, lmproto.DEFAULT_MAX_PAYLOAD)
        self._peer = peer
        self._buffer = memoryview(bytearray())   # reused for every payload (see the module docstring)

    def _scratch(self, size: int) -> memoryview:
        """`size` bytes of the session buffer, grown (to exactly `size`) when too small."""
        if len(self._buffer) < size:
            self._buffer = aligned(size)
        return self._buffer[:size]

    def serve(self) -> None:
        header = memoryview(bytearray(lmproto.REQUEST_SIZE))
        try:
            while True:
                if not self._head.begin(header):
                    return   # the client closed between requests: normal end
                _quickack(self._sock)
                request = lmproto.parse_request(header, max_payload=self._max_payload)
                self._handle(request)
        except Timeout as exc:
            log.info("lm:// %s: %s; closing the connection", self._peer, exc)
        except (ProtocolError, TooLarge) as exc:
            log_throttled(log, _throttle, "garbage", logging.WARNING, "lm:// %s: %s; closing the connection",
                          self._peer, exc)
        except (OSError, Unavailable) as exc:
            log.info("lm:// %s went away: %s", self._peer, exc)
        finally:
            self._sock.close()

    def _handle(self, request: lmproto.Request) -> None:
        op = _OPS.get(request.command)
        if op is None:
            self._dispatch(request)
            return
        latency = self._metrics.access.latency.labels(op=op)
        start = time.perf_counter()
        try:
            self._dispatch(request)
        finally:
            latency.observe(time.perf_counter() - start)

    def _dispatch(self, request: lmproto.Request) -> None:
        match request.command:
            case lmproto.Command.PUT:
                self._put(request)
            case lmproto.Command.GET:
                self._get(request.key)
            case lmproto.Command.EXIST:
                self._sock.sendall(lmproto.encode_exist(self._exists(request.key)))
            case lmproto.Command.HEALTH:
                self._sock.sendall(lmproto.SUCCESS_REPLY)
            case lmproto.Command.LIST:
                pass   # the stock server answers nothing either; the 0.5.6 client never sends it

    def _put(self, request: lmproto.Request) -> None:
        payload = self._scratch(request.meta.length)
        recv_exactly_into(self._sock, payload)
        _quickack(self._sock)
        self._metrics.access.bytes_in("lm", len(payload))
        try:
            self._kv.put(request.key, payload, user_meta=request.meta.pack())
        except CurvineError as exc:
            self._metrics.errors.record(exc)
            log_throttled(log, _throttle, "put", logging.WARNING, "lm:// put %s failed (it stays a miss): %s",
                          request.key, exc)

    def _receive(self, key: str) -> tuple[memoryview, bytes] | None:
        """The object (in the session buffer) and its stored descriptor, or None on a miss."""
        if len(self._buffer):
            try:
                return self._kv.get_with_meta(key, self._buffer)
            except InvalidArgument:
                pass   # larger than the session buffer: receive into a new one and keep that
        found = self._kv.get_with_meta(key)
        if found is not None:
            self._buffer = found[0]
        return found

    def _get(self, key: str) -> None:
        try:
            found = self._receive(key)
        except CurvineError as exc:
            self._metrics.errors.record(exc)
            log_throttled(log, _throttle, "get", logging.WARNING, "lm:// get %s failed, answering a miss: %s",
                          key, exc)
            found = None
        self._metrics.access.lookup("lm", found is not None)
        if found is None:
            self._sock.sendall(lmproto.FAIL_REPLY)
            return
        data, user_meta = found
        head = lmproto.encode_hit(stored_meta(user_meta, len(data)))
        sent = self._sock.sendmsg([head, data])   # header + payload in one write
        if sent < len(head):
            self._sock.sendall(head[sent:])
            self._sock.sendall(data)
        elif sent < len(head) + len(data):
            self._sock.sendall(data[sent - len(head):])
        self._metrics.access.bytes_out("lm", len(data))

    def _exists(self, key: str) -> bool:
        try:
            found = self._kv.exists_prefix([key], pin=True) == 1
        except CurvineError as exc:
            self._metrics.errors.record(exc)
            log_throttled(log, _throttle, "exist", logging.WARNING, "lm:// exist %s failed, answering a miss: %s",
                          key, exc)
            found = False
        self._metrics.access.lookup("lm", found)
        return found


class LmServer:
    """The `lm://` port of a worker. `start()` binds (port 0 = any) and returns the bound port."""

    def __init__(self, kv: KVClient, *, host: str, port: int, max_payload: int,
                 limits: ServerLimits = UNBOUNDED, gate: ConnectionGate | None = None,
                 peers: PeerFilter | None = None, local_users: LocalUsers | None = None,
                 metrics: WorkerMetrics | None = None) -> None:
        self._kv = kv
        self._local_users = local_users or LocalUsers()
        self._metrics = metrics or register_worker(CollectorRegistry())
        self._peers = peers or PeerFilter()
        self._limits = limits
        self._gate = gate
        self._host = host
        self._port = port
        self._max_payload = max_payload
        self._listener: Listener | None = None

    def start(self) -> int:
        sock = bind_tcp(self._host, self._port)
        port = int(sock.getsockname()[1])

        def serve(conn: socket.socket, peer: str) -> None:
            try:
                self._local_users.check(conn)
            except PermissionDenied as exc:   # closed before a byte is read: it holds no slot for long
                log_throttled(log, _throttle, "uid", logging.WARNING, "lm:// refusing %s: %s", peer, exc.message)
                conn.close()
                return
            with self._metrics.connections.held("lm"):
                LmSession(conn, self._kv, max_payload=self._max_payload, peer=peer, limits=self._limits,
                          metrics=self._metrics).serve()

        self._listener = Listener(sock, serve, "lm", gate=self._gate, check_peer=self._peers.check)
        self._listener.start()
        log.info("lm:// server listening on %s:%d%s", self._host, port,
                 f" for peers in {', '.join(map(str, self._peers.networks))}" if self._peers.networks else "")
        return port

    def stop(self) -> None:
        if self._listener is not None:
            self._listener.stop()
            self._listener = None

"""Accept loops of the worker's servers (the data plane on TCP and on the short-circuit unix socket,
the lm:// port): a thread per admitted connection, within the worker's connection caps.

Back-pressure instead of failure: a connection over a cap (limits.py) is handed to `refuse` (the
data plane answers it with an EAGAIN error frame, refuser.py; lm:// closes it), and open
connections go on being served. Out of file descriptors (EMFILE/ENFILE on accept), the listener
closes a spare descriptor it keeps for the purpose, accepts the waiting connection and closes it at
once (no descriptor to spare for reading its request and answering it): its client sees EOF and
tries the next replica or misses, instead of waiting in the backlog until it times out; the backlog
drains at accept speed.
Repeated errors are logged rate-limited (throttle.py).
"""
from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import threading
from collections.abc import Callable

from curvine_py.core.errors import Busy, CurvineError
from curvine_py.transport import blocking
from curvine_py.worker.limits import ConnectionGate, peer_key
from curvine_py.worker.throttle import LogThrottle, log_throttled

log = logging.getLogger(__name__)

LISTEN_BACKLOG = 512
OUT_OF_FDS = (errno.EMFILE, errno.ENFILE)

ConnectionHandler = Callable[[socket.socket, str], None]
Refusal = Callable[[socket.socket, CurvineError], None]
# Raises a CurvineError for a peer (its IP address) that may not connect at all.
PeerCheck = Callable[[str], None]


def close_refused(conn: socket.socket, error: CurvineError) -> None:
    """The refusal of a protocol without error frames (lm://): close at once."""
    with contextlib.suppress(OSError):
        conn.close()


def bind_tcp(host: str, port: int) -> socket.socket:
    """A listening TCP socket (port 0 = any free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(LISTEN_BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock


def _spare_fd() -> int:
    try:
        return os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return -1


class Listener:
    """An accept loop on a bound, listening socket, a thread per connection running `handler`."""

    def __init__(self, sock: socket.socket, handler: ConnectionHandler, name: str, *,
                 gate: ConnectionGate | None = None, refuse: Refusal | None = None,
                 throttle: LogThrottle | None = None, check_peer: PeerCheck | None = None) -> None:
        self.sock = sock
        self._handler = handler
        self._name = name
        self._gate = gate
        self._refuse = refuse or close_refused
        self._throttle = throttle or LogThrottle()
        self._check_peer = check_peer
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._spare = _spare_fd()
        self.refused = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._accept_loop, name=f"{self._name}-accept", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stops accepting, closes every connection (their threads end on the socket error)."""
        self._stopping = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)   # wakes accept() on Linux; close() alone does not
        with contextlib.suppress(OSError):
            self.sock.close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._spare >= 0:
            os.close(self._spare)
            self._spare = -1

    def _log(self, kind: str, level: int, message: str, *args: object) -> None:
        log_throttled(log, self._throttle, f"{self._name}:{kind}", level, "%s: " + message, self._name, *args)

    def _accept_loop(self) -> None:
        while not self._stopping:
            try:
                conn, address = self.sock.accept()
            except OSError as exc:
                if self._stopping:
                    return
                if exc.errno in OUT_OF_FDS:
                    self._shed()
                elif exc.errno in (errno.ENOBUFS, errno.ENOMEM):
                    self._log("accept", logging.ERROR, "cannot accept: %s", exc)
                    threading.Event().wait(0.05)   # let memory free up rather than spin
                continue
            self._admit(conn, address)

    def _shed(self) -> None:
        """Out of descriptors: spend the spare one on answering the next waiting client."""
        if self._spare < 0:
            self._spare = _spare_fd()
            if self._spare < 0:
                self._log("fds", logging.ERROR, "out of file descriptors, cannot even refuse new connections")
                threading.Event().wait(0.05)
                return
        os.close(self._spare)
        self._spare = -1
        try:
            conn, _ = self.sock.accept()
        except OSError:
            conn = None
        if conn is not None:
            self.refused += 1
            self._log("fds", logging.ERROR, "out of file descriptors: closing new connections at once")
            close_refused(conn, Busy("out of file descriptors"))
        self._spare = _spare_fd()

    def _admit(self, conn: socket.socket, address: object) -> None:
        peer_id = peer_key(conn, address)
        if self._check_peer is not None:
            try:
                self._check_peer(peer_id)
            except CurvineError as exc:   # before a byte is read, and before it counts anywhere
                self.refused += 1
                self._log("peer", logging.WARNING, "refusing a connection: %s", exc.message)
                self._refuse(conn, exc)
                return
        refusal = self._gate.admit(peer_id) if self._gate is not None else None
        if refusal is not None:
            self.refused += 1
            self._log("cap", logging.WARNING, "refusing a connection from %s: %s", peer_id, refusal.message)
            self._refuse(conn, refusal)
            return
        if conn.family in (socket.AF_INET, socket.AF_INET6) and isinstance(address, tuple):
            blocking.set_fast_options(conn)
            blocking.set_local_options(conn)   # replies to a loopback peer: no pacing
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            peer = f"{address[0]}:{address[1]}"
        else:
            peer = f"{self._name}-{peer_id}"
        with self._lock:
            self._connections.add(conn)
        thread = threading.Thread(target=self._serve, args=(conn, peer, peer_id), name=f"{self._name}-{peer}",
                                  daemon=True)
        try:
            thread.start()
        except RuntimeError as exc:   # cannot start a thread: as out of resources
            self._log("thread", logging.ERROR, "cannot start a connection thread: %s", exc)
            self._release(conn, peer_id)
            self._refuse(conn, Busy("worker out of threads; try another replica"))

    def _serve(self, conn: socket.socket, peer: str, peer_id: str) -> None:
        try:
            self._handler(conn, peer)
        finally:
            self._release(conn, peer_id)

    def _release(self, conn: socket.socket, peer_id: str) -> None:
        with self._lock:
            self._connections.discard(conn)
        if self._gate is not None:
            self._gate.release(peer_id)

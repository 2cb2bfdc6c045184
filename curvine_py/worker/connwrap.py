"""What wraps the serving of one data-plane connection: a TLS handshake (and the set of wrapped
connections, so a stop can end them) and, when asked for, a cProfile run."""
from __future__ import annotations

import contextlib
import logging
import os
import socket
import ssl
import threading
from collections.abc import Callable

from curvine_py.rpc import tls
from curvine_py.worker.listener import ConnectionHandler

log = logging.getLogger(__name__)


def profiled(run: Callable[[], None], directory: str, name: str) -> None:
    """`run()` under cProfile, its stats dumped to DIRECTORY/worker-NAME-PID-THREAD.prof. The clock is
    the thread's CPU time, so a wait for the peer costs nothing and what is left is the work."""
    import cProfile  # only when profiling is asked for
    import time

    profile = cProfile.Profile(time.thread_time_ns, 1e-9)
    try:
        profile.runcall(run)
    finally:
        profile.dump_stats(os.path.join(directory, f"worker-{name}-{os.getpid()}-{threading.get_ident()}.prof"))


class TlsConnections:
    """The wrapped connections being served, so stop() can end them (the listener only knows the
    plain sockets, which the handshake detached from their descriptors)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: set[socket.socket] = set()

    def add(self, sock: socket.socket) -> None:
        with self._lock:
            self._live.add(sock)

    def discard(self, sock: socket.socket) -> None:
        with self._lock:
            self._live.discard(sock)

    def shutdown_all(self) -> None:
        with self._lock:
            live = list(self._live)
        for sock in live:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def tls_handler(context: ssl.SSLContext, serve: ConnectionHandler, handshake_s: float,
                live: TlsConnections) -> ConnectionHandler:
    """`serve` behind a TLS handshake (bounded by `handshake_s`); a peer that fails it (no TLS,
    no or a foreign client certificate) is closed without an answer."""
    def serve_tls(conn: socket.socket, peer: str) -> None:
        try:
            wrapped = tls.wrap_server(context, conn, handshake_s)
        except (OSError, ValueError) as exc:      # ssl.SSLError is an OSError
            log.info("data plane: TLS handshake with %s failed: %s", peer, exc)
            conn.close()
            return
        live.add(wrapped)
        try:
            serve(wrapped, peer)
        finally:
            live.discard(wrapped)
            wrapped.close()
    return serve_tls

"""A small threaded HTTP server for the read-only endpoints (`/metrics`, the status page): bound
before it returns (so a caller can pass port -1 and read the port), served on a daemon thread,
closed by `close()`.

Port convention of every such flag (as `--lm-port`): 0 = off, -1 = any free port, else that port.

Resource handling: one thread per request (daemon threads: a slow scraper cannot keep a stopping
process alive) and a socket timeout per connection, so an idle or stalled peer holds one thread for
at most `REQUEST_TIMEOUT_S`.
"""
from __future__ import annotations

import http.server
import logging
import socket
import sys
import threading
from typing import Any, Self

from curvine_py.core.errors import InvalidArgument, Unavailable

log = logging.getLogger(__name__)

OFF = 0
ANY_PORT = -1
REQUEST_TIMEOUT_S = 10.0


def check_port(port: int, flag: str) -> int:
    """`port` if it is 0 (off), -1 (any free port) or a TCP port; InvalidArgument otherwise."""
    if not ANY_PORT <= port < 65536:
        raise InvalidArgument(f"{flag} must be a port, 0 (off) or -1 (any free port), got {port}")
    return port


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[http.server.BaseHTTPRequestHandler],
                 family: socket.AddressFamily) -> None:
        self.address_family = family
        super().__init__(address, handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Called by socketserver inside its except clause: a peer that went away is not news.
        log.debug("HTTP request from %s failed: %s", client_address, sys.exc_info()[1])


class HttpService:
    """A running server; `port` is the bound port."""

    def __init__(self, host: str, port: int, handler: type[http.server.BaseHTTPRequestHandler],
                 name: str) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        handler.timeout = REQUEST_TIMEOUT_S
        try:
            self._server = _Server((host, max(port, 0)), handler, family)
        except OSError as exc:
            raise Unavailable(f"{name}: cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        self.host = host
        self.port = int(self._server.server_address[1])
        self.name = name
        self._thread = threading.Thread(target=self._server.serve_forever, name=name, daemon=True)
        self._thread.start()
        log.info("%s serving on http://%s:%d/", name, host, self.port)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def serve(host: str, port: int, handler: type[http.server.BaseHTTPRequestHandler],
          name: str) -> HttpService | None:
    """Starts `handler` on host:port; None when `port` is 0 (off)."""
    if check_port(port, name) == OFF:
        return None
    return HttpService(host, port, handler, name)

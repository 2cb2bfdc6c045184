"""The master's read-only status page over HTTP: `serve_status(host, port, source)` serves the page
rendered from whatever `source()` returns at each request, and `master_source(master)` is the source
fed by the master's own RPCs (`Report`, and `GetPolicy` of `/` and of each top-level directory that
has its own policy).

Paths: `/` (the page), `/healthz` (`ok`, for a load balancer); anything else is 404. Only GET and
HEAD are served; the page has no form and changes nothing.

Error handling: a source that fails (the master unreachable, a timeout) yields a page that says so
with status 503, never the previous report passed off as current.

Security: the page shows worker addresses and directory paths and has no authentication of its
own; it binds the master's host, whose non-loopback use already needs a token or `--insecure`.
"""
from __future__ import annotations

import datetime
import http.server
import logging
import time
from collections.abc import Callable
from typing import ClassVar, Protocol

from curvine_py.core.cluster import ClusterReport
from curvine_py.core.domain import DirPage, FileType, InodeId, PolicyAt
from curvine_py.core.errors import CurvineError, NotFound
from curvine_py.core.posix import ROOT_INO
from curvine_py.observe.httpserve import HttpService, serve
from curvine_py.observe.statuspage import DEFAULT_REFRESH_S, render
from curvine_py.observe.statusview import StatusView, status_view, unavailable_view

log = logging.getLogger(__name__)

MAX_POLICY_DIRS = 64    # top-level directories asked for their policy per page load (one RPC each)

StatusSource = Callable[[], StatusView]


class StatusMaster(Protocol):
    """What the page asks the master; the client library's MasterClient is one (observe does not
    import the client: the role that serves the page passes it in)."""

    address: str

    def report(self) -> ClusterReport: ...

    def get_policy(self, path: str) -> PolicyAt: ...

    def readdir(self, ino: InodeId, after_name: str = "", limit: int = 1000, *, eager: bool = False) -> DirPage: ...


def read_policies(master: StatusMaster, limit: int = MAX_POLICY_DIRS) -> list[PolicyAt]:
    """The root's policy and those of the top-level directories that define their own (a directory
    that inherits is not listed: its policy is its parent's row)."""
    replies = [master.get_policy("/")]
    directories = [e.name for e in master.readdir(ROOT_INO, limit=limit).entries
                   if e.attr.type == FileType.DIRECTORY]
    for name in directories:
        try:
            reply = master.get_policy("/" + name)
        except NotFound:
            continue    # removed between the listing and the question
        if reply.path == "/" + name:
            replies.append(reply)
    return replies


def master_source(master: StatusMaster, *, clock: Callable[[], float] = time.time) -> StatusSource:
    """A source that asks the master at every call; `clock` (seconds) dates heartbeats."""

    def source() -> StatusView:
        try:
            report = master.report()
            policies = read_policies(master)
        except CurvineError as exc:
            return unavailable_view(master.address, exc.message)
        return status_view(report, now_ms=int(clock() * 1000), policies=policies, master=master.address)

    return source


class StatusHandler(http.server.BaseHTTPRequestHandler):
    source: ClassVar[StatusSource]
    refresh_s: ClassVar[int] = DEFAULT_REFRESH_S
    server_version = "curvine-py-status"

    def do_GET(self) -> None:
        self._answer(send_body=True)

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def _answer(self, send_body: bool) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/healthz":
            self._reply(200, "text/plain; charset=utf-8", b"ok\n", send_body)
        elif path in ("/", "/index.html"):
            try:
                view = type(self).source()
            except Exception as exc:   # a broken source is shown on the page, not a dead server
                log.exception("status source failed")
                view = unavailable_view("", f"internal error: {exc}")
            generated = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
            page = render(view, refresh_s=type(self).refresh_s, generated=generated,
                          metrics_host=self._host_name()).encode()
            self._reply(503 if view.error else 200, "text/html; charset=utf-8", page, send_body)
        else:
            self._reply(404, "text/plain; charset=utf-8", b"not found\n", send_body)

    def _host_name(self) -> str:
        """The host the browser asked for (its Host header without the port): the master's
        /metrics link points there, so it works through whatever name reached the page."""
        host = (self.headers.get("Host") or "").strip()
        if host.startswith("["):
            return host[1:].partition("]")[0]
        name = host.rpartition(":")[0] if host.count(":") == 1 else host
        return name if all(c.isalnum() or c in ".-_" for c in name) else ""

    def _reply(self, status: int, content_type: str, body: bytes, send_body: bool) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        log.debug("status page: " + format, *args)


def serve_status(host: str, port: int, source: StatusSource, *,
                 refresh_s: int = DEFAULT_REFRESH_S) -> HttpService | None:
    """The status page on host:port (0 = off, -1 = any free port) until close()."""
    if refresh_s < 1:
        raise ValueError(f"refresh_s must be at least 1, got {refresh_s}")
    handler = type("BoundStatusHandler", (StatusHandler,),
                   {"source": staticmethod(source), "refresh_s": refresh_s})
    return serve(host, port, handler, "status page")

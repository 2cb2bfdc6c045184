"""A minimal in-memory `lm://` server written only from curvine_py.core.lmproto: the proof that
the codec talks to the real LMCache client, and a reference for the worker's `lm://` endpoint.

What it does that the stock server does not: TCP_NODELAY, TCP_QUICKACK re-armed after every read,
and each reply (header + payload) handed to the kernel in one `sendmsg` (the 0.5.6 client reads a reply header with a single `recv(36)`;
Nagle + delayed ACK otherwise costs ~40 ms per small GET). One thread per connection, requests
strictly in order (the protocol has no request ids).

    with SpecLMServer() as server:        # thread in this process
        engine_config(remote_url=server.url)

    python -m tests.lmcache.spec_server HOST PORT   # prints "lm=HOST:PORT" once listening
"""
from __future__ import annotations

import socket
import sys
import threading
from typing import Self

from curvine_py.core import lmproto
from curvine_py.core.errors import CurvineError
from curvine_py.core.lmproto import Command, ObjectMeta


def _recv_exactly(sock: socket.socket, n: int) -> bytearray | None:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            return None
        got += k
        # Quick-ACK is one-shot in Linux: re-arm it after every read, or a client blocked on
        # Nagle (PUT has no reply, so the next request waits for our ACK) stalls ~40 ms.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
    return buf


def _send_parts(conn: socket.socket, *parts: bytes) -> None:
    """Header and payload in one sendmsg (one segment for the header); finish a partial write."""
    views = [memoryview(p) for p in parts]
    while views:
        sent = conn.sendmsg(views)
        while views and sent >= len(views[0]):
            sent -= len(views[0])
            views.pop(0)
        if views:
            views[0] = views[0][sent:]


class SpecLMServer:
    def __init__(self, host: str = "127.0.0.1", port: int = 0, *,
                 max_payload: int = lmproto.DEFAULT_MAX_PAYLOAD) -> None:
        self._listener = socket.create_server((host, port))
        self.host, self.port = self._listener.getsockname()[:2]
        self.max_payload = max_payload
        self.store: dict[str, tuple[ObjectMeta, bytes]] = {}
        self.requests: dict[Command, int] = dict.fromkeys(Command, 0)
        self.protocol_errors: list[str] = []
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._closing = False

    @property
    def url(self) -> str:
        return f"lm://{self.host}:{self.port}"

    def __enter__(self) -> Self:
        thread = threading.Thread(target=self.serve_forever, name="spec-lm-accept", daemon=True)
        thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._closing = True
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()

    def serve_forever(self) -> None:
        while not self._closing:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            while True:
                header = _recv_exactly(conn, lmproto.REQUEST_SIZE)
                if header is None:
                    return
                try:
                    req = lmproto.parse_request(header, max_payload=self.max_payload)
                except CurvineError as exc:
                    # No request ids, no resync: drop the connection, as the codec docstring says.
                    self.protocol_errors.append(f"{type(exc).__name__}: {exc}")
                    return
                with self._lock:
                    self.requests[req.command] += 1
                if req.command is Command.PUT:
                    payload = _recv_exactly(conn, req.payload_length)
                    if payload is None:
                        return
                    with self._lock:
                        self.store[req.key] = (req.meta, bytes(payload))
                elif req.command is Command.GET:
                    with self._lock:
                        hit = self.store.get(req.key)
                    if hit is None:
                        conn.sendall(lmproto.FAIL_REPLY)
                    else:
                        meta, data = hit
                        _send_parts(conn, lmproto.encode_hit(meta), data)
                elif req.command is Command.EXIST:
                    with self._lock:
                        found = req.key in self.store
                    conn.sendall(lmproto.encode_exist(found))
                elif req.command is Command.HEALTH:
                    conn.sendall(lmproto.SUCCESS_REPLY)
                # LIST: the stock server sends nothing and the 0.5.6 client never asks.


def main(argv: list[str]) -> int:
    server = SpecLMServer(argv[0], int(argv[1]))
    print(f"lm={server.host}:{server.port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

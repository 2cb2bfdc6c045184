"""A TCP relay on loopback that a test can cut and restore: put it between a worker and the master
(`--master relay.address`) and the worker's heartbeats stop reaching the master while everything
else about the worker (its data plane, its disks) keeps working, as on a machine so starved that
its heartbeats come late.

    with Relay(cluster.master_address) as relay:
        ... start a worker with --master relay.address ...
        relay.cut()        # every connection through it is closed; new ones are closed at once
        relay.restore()

Resource handling: one accept thread and two pump threads per relayed connection, all daemons;
`close()` (or leaving the `with`) closes the listener and every socket, which ends them.
"""
from __future__ import annotations

import socket
import threading
from typing import Self

BUFFER = 1 << 16


class Relay:
    def __init__(self, target: str) -> None:
        host, _, port = target.rpartition(":")
        self._target = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._cut = False
        self._closed = False
        threading.Thread(target=self._accept, name="relay-accept", daemon=True).start()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def cut(self) -> None:
        with self._lock:
            self._cut = True
            self._close_all()

    def restore(self) -> None:
        with self._lock:
            self._cut = False

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._close_all()
        self._listener.close()

    def _close_all(self) -> None:
        for sock in self._open:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        self._open.clear()

    def _accept(self) -> None:
        while True:
            try:
                inbound, _ = self._listener.accept()
            except OSError:
                return   # closed
            with self._lock:
                refused = self._cut or self._closed
            if refused:
                inbound.close()
                continue
            try:
                outbound = socket.create_connection(self._target, timeout=10)
            except OSError:
                inbound.close()
                continue
            outbound.settimeout(None)
            with self._lock:
                if self._cut or self._closed:
                    inbound.close()
                    outbound.close()
                    continue
                self._open.update((inbound, outbound))
            for source, sink in ((inbound, outbound), (outbound, inbound)):
                threading.Thread(target=self._pump, args=(source, sink), name="relay-pump", daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(BUFFER):
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            with self._lock:
                for sock in (source, sink):
                    if sock in self._open:
                        self._open.discard(sock)
                        try:
                            sock.shutdown(socket.SHUT_RDWR)
                        except OSError:
                            pass
                        sock.close()

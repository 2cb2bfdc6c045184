"""Sockets that connect to the master and send nothing are closed by it after the handshake
timeout (master/service.py HANDSHAKE_TIMEOUT_MS), and a real client is served while they are
open: a peer without the token cannot hold the master's file descriptors."""
from __future__ import annotations

import pathlib
import socket
import time

from curvine_py.master.service import HANDSHAKE_TIMEOUT_MS
from tests.harness import Cluster

TOKEN = "t" * 32
SILENT = 200


def _closed_by_peer(sock: socket.socket, deadline: float) -> bool:
    """True once the master closes `sock` (it first sends its own HTTP/2 settings: read past them)."""
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            if sock.recv(4096) == b"":
                return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False
    return False


def test_silent_sockets_are_closed_and_clients_are_served_meanwhile(tmp_path: pathlib.Path) -> None:
    with Cluster(tmp_path, workers=1, token=TOKEN) as cluster:
        assert cluster.master is not None
        host, port = cluster.master.address.rsplit(":", 1)
        silent = [socket.create_connection((host, int(port)), timeout=5) for _ in range(SILENT)]
        try:
            client = cluster.client()
            client.fs.mkdir("/served")
            assert "/served" in {entry.path for entry in client.fs.ls("/")}
            # Generous bound: the master closes them after its timeout, not at once and not never.
            deadline = time.monotonic() + HANDSHAKE_TIMEOUT_MS / 1000 * 3 + 10
            closed = 0
            for sock in silent:
                closed += _closed_by_peer(sock, deadline)
            assert closed == SILENT
            client.fs.mkdir("/served-after")
        finally:
            for sock in silent:
                sock.close()

"""The data plane over TLS in process (rpc/tls.py, worker/server.py): a client with a certificate
of the CA puts and reads a stored file larger than the inline size (the path that uses sendfile on
plain TCP), idle and header timeouts still apply on TLS (a kernel timeout surfaces as the plain
socket's), and stop() ends the TLS connections being served."""
from __future__ import annotations

import os
import pathlib
import socket
import ssl
import time

from curvine_py.client.dataconn import WorkerConnection
from curvine_py.core import frames, layout
from curvine_py.proto.curvine.v1.data_pb2 import DataHeader
from curvine_py.rpc.tls import TlsFiles, client_context, server_context
from curvine_py.worker.limits import ServerLimits
from curvine_py.worker.server import DataServer, WorkerState
from curvine_py.worker.store import Store
from tests.tlscerts import make_authority

MiB = 1 << 20


def test_tls_data_plane_serves_and_stops(tmp_path: pathlib.Path) -> None:
    authority = make_authority(tmp_path, "ca")
    cert, key = authority.issue("worker")
    client_cert, client_key = authority.issue("client")
    limits = ServerLimits(idle_timeout_s=30.0, header_timeout_s=1.0)
    with Store([(os.path.join(tmp_path, "d0"), 0)]) as store:
        server = DataServer(store, WorkerState("w"), host="127.0.0.1", port=0, token="", max_payload=16 * MiB,
                            limits=limits, tls=server_context(TlsFiles(cert, key, authority.ca)))
        host, port = server.start()
        context = client_context(TlsFiles(client_cert, client_key, authority.ca))
        conn = WorkerConnection(host, port, token="", timeout_s=10, max_payload=16 * MiB, tls=context)
        try:
            data = os.urandom(3 * MiB + 5)
            conn.request(frames.Op.PUT, DataHeader(key="k", length=len(data), checksum=layout.object_checksum(data)),
                         data)
            reply = conn.request(frames.Op.GET, DataHeader(key="k"))
            assert reply.payload is not None and bytes(reply.payload) == data
            assert isinstance(conn._sock, ssl.SSLSocket)

            # A half-sent header over TLS is closed at the header deadline, as on plain TCP.
            half = context.wrap_socket(socket.create_connection((host, port), timeout=10))
            half.sendall(frames.encode(frames.Op.HELLO, 1, DataHeader(token=""))[:5])
            started = time.monotonic()
            assert half.recv(1) == b""
            assert time.monotonic() - started < 8
            half.close()

            idle = WorkerConnection(host, port, token="", timeout_s=10, max_payload=MiB, tls=context)
            server.stop()
            idle_sock = idle._sock
            idle_sock.settimeout(5)
            assert idle_sock.recv(1) == b"", "stop() ended the TLS connection"
            idle.close()
        finally:
            conn.close()
            server.stop()

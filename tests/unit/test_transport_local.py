"""Connections from this host's loopback get Reno instead of the default congestion control
(transport/blocking.py set_local_options), on the worker's accepted side and on the client's
connecting side; every other peer keeps the host's default."""
from __future__ import annotations

import contextlib
import pathlib
import socket
import threading
from collections.abc import Iterator

import pytest

from curvine_py.client.dataconn import WorkerConnection
from curvine_py.core.addresses import is_loopback_address
from curvine_py.proto.curvine.v1.data_pb2 import DataHeader
from curvine_py.transport import blocking
from curvine_py.worker.listener import Listener, bind_tcp


def congestion_control(sock: socket.socket) -> bytes:
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\0")


def host_default() -> bytes:
    return pathlib.Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text().strip().encode()


@contextlib.contextmanager
def accepted(host: str) -> Iterator[tuple[socket.socket, socket.socket]]:
    """(client, server side) of one TCP connection to `host`."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as listener:
        listener.bind((host, 0))
        listener.listen(1)
        client = socket.create_connection(listener.getsockname()[:2], timeout=5)
        server, _ = listener.accept()
        try:
            yield client, server
        finally:
            client.close()
            server.close()


def local_non_loopback_address() -> str | None:
    """An address of this host that is not loopback (the one a default route would use)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 9))   # no packet is sent for a UDP connect
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if is_loopback_address(address) else address


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.3.2.1", True), ("::1", True), ("::ffff:127.0.0.1", True), ("::1%lo", True),
    ("10.0.0.1", False), ("192.168.1.5", False), ("::ffff:10.0.0.1", False), ("fe80::1%eth0", False),
    ("2001:db8::1", False), ("localhost", False), ("", False), ("garbage", False),
])
def test_loopback_addresses(host: str, loopback: bool) -> None:
    assert is_loopback_address(host) is loopback


def test_loopback_peer_gets_reno() -> None:
    with accepted("127.0.0.1") as (_client, server):
        assert blocking.set_local_options(server) is True
        assert congestion_control(server) == blocking.LOCAL_CONGESTION_CONTROL


def test_non_tcp_and_remote_peers_keep_the_default() -> None:
    left, right = socket.socketpair()
    with left, right:
        assert blocking.set_local_options(left) is False
    address = local_non_loopback_address()
    if address is None:
        pytest.skip("this host has no non-loopback IPv4 address")
    with accepted(address) as (_client, server):
        assert blocking.set_local_options(server) is False
        assert congestion_control(server) == host_default()


def test_listener_applies_it_to_loopback_connections() -> None:
    seen: list[bytes] = []
    done = threading.Event()

    def handler(conn: socket.socket, _peer: str) -> None:
        seen.append(congestion_control(conn))
        done.set()
        conn.close()

    listener = Listener(bind_tcp("127.0.0.1", 0), handler, "cc-test")
    listener.start()
    try:
        with socket.create_connection(listener.sock.getsockname(), timeout=5):
            assert done.wait(5)
    finally:
        listener.stop()
    assert seen == [blocking.LOCAL_CONGESTION_CONTROL]


@contextlib.contextmanager
def hello_server(host: str) -> Iterator[tuple[str, int]]:
    """A listener on `host` that answers one connection's HELLO (what WorkerConnection sends first)
    and leaves its own congestion control alone."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.bind((host, 0))
    listener.listen(1)

    def answer() -> None:
        conn, _ = listener.accept()
        with conn:
            prefix, _header = blocking.read_head(conn, max_payload=1 << 20, expect_response=False)
            blocking.send_frame(conn, prefix.op, prefix.request_id, DataHeader(worker_id="w-cc"), response=True)
            conn.recv(1)   # until the client closes

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        yield host, listener.getsockname()[1]
    finally:
        listener.close()
        thread.join(5)


def connect(host: str, port: int) -> WorkerConnection:
    return WorkerConnection(host, port, token="", timeout_s=5, max_payload=1 << 20)


def test_client_connection_to_a_loopback_worker_gets_reno() -> None:
    with hello_server("127.0.0.1") as (host, port):
        conn = connect(host, port)
        try:
            assert conn.worker_id == "w-cc"
            assert congestion_control(conn._sock) == blocking.LOCAL_CONGESTION_CONTROL
        finally:
            conn.close()


def test_client_connection_to_a_remote_worker_keeps_the_default() -> None:
    address = local_non_loopback_address()
    if address is None:
        pytest.skip("this host has no non-loopback IPv4 address")
    with hello_server(address) as (host, port):
        conn = connect(host, port)
        try:
            assert conn.worker_id == "w-cc"
            assert congestion_control(conn._sock) == host_default()
        finally:
            conn.close()

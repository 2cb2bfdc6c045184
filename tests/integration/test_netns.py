"""tests/netns.py: namespaces reach the root-side address and each other over the veth/bridge,
have their own loopback, and everything is torn down, also when the body raises."""
from __future__ import annotations

import socket
import subprocess
import sys
import threading

import pytest

from tests.netns import IP, leftovers, network_namespaces, requires_netns

pytestmark = requires_netns()

CONNECT = """
import socket, sys
with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5) as s:
    s.sendall(sys.argv[3].encode())
    print(s.recv(100).decode())
"""


def _links() -> str:
    return subprocess.run([IP, "-o", "link", "show"], capture_output=True, text=True, check=True).stdout


def test_namespaces_connect_to_root_address_and_tear_down() -> None:
    with network_namespaces(2) as lab:
        names = [ns.name for ns in lab]
        assert len(set(names)) == 2
        assert lab[0].address != lab[1].address != lab.root_address
        server = socket.create_server((lab.root_address, 0))
        port = server.getsockname()[1]
        seen: list[tuple[str, str]] = []

        def serve() -> None:
            for _ in range(2):
                conn, peer = server.accept()
                with conn:
                    seen.append((conn.recv(100).decode(), peer[0]))
                    conn.sendall(b"ack")

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        for ns in lab:
            proc = ns.run([sys.executable, "-c", CONNECT, lab.root_address, str(port), ns.name])
            assert proc.returncode == 0, proc.stderr
            assert proc.stdout.strip() == "ack"
        thread.join(10)
        server.close()
        # The server saw each namespace's own address: traffic really crossed the veth links.
        assert sorted(seen) == sorted((ns.name, ns.address) for ns in lab)
        links = _links()
        assert lab.bridge in links and all(ns.veth_root in links for ns in lab)
    assert not set(names) & set(leftovers())
    links = _links()
    assert lab.bridge not in links
    assert not any(ns.veth_root in links for ns in lab)


def test_namespace_to_namespace_and_private_loopback() -> None:
    with network_namespaces(2) as lab:
        # A server on ns0's address, reached from ns1 through the bridge.
        proc = subprocess.Popen([*lab[0].prefix, sys.executable, "-c", """
import socket, sys
s = socket.create_server((sys.argv[1], 0)); print(s.getsockname()[1], flush=True)
c, peer = s.accept(); c.sendall(peer[0].encode()); c.close()
""", lab[0].address], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            port = proc.stdout.readline().strip()
            got = lab[1].run([sys.executable, "-c", """
import socket, sys
with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5) as s:
    print(s.recv(100).decode())
""", lab[0].address, port])
            assert got.returncode == 0, got.stderr
            assert got.stdout.strip() == lab[1].address
        finally:
            proc.wait(10)
        # lo is up inside, and it is the namespace's own: the root's loopback listener is invisible.
        root_lo = socket.create_server(("127.0.0.1", 0))
        try:
            probe = lab[0].run([sys.executable, "-c", """
import socket, sys
own = socket.create_server(("127.0.0.1", 0))
socket.create_connection(own.getsockname(), timeout=2).close()
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2)
    print("root loopback reachable")
except ConnectionRefusedError:
    print("isolated")
""", str(root_lo.getsockname()[1])])
        finally:
            root_lo.close()
        assert probe.returncode == 0, probe.stderr
        assert probe.stdout.strip() == "isolated"


def test_teardown_on_failure_kills_leftover_processes() -> None:
    names: list[str] = []
    sleeper: subprocess.Popen[bytes] | None = None
    with pytest.raises(RuntimeError, match="boom"), network_namespaces(1) as lab:
        names = [lab[0].name]
        sleeper = subprocess.Popen([*lab[0].prefix, "sleep", "300"])
        raise RuntimeError("boom")
    assert sleeper is not None
    assert sleeper.wait(10) == -9  # killed by the teardown, not left running
    assert not set(names) & set(leftovers())


def test_bad_arguments() -> None:
    with pytest.raises(ValueError), network_namespaces(0):
        pass
    with pytest.raises(ValueError), network_namespaces(3, subnet="10.77.250.0/30"):
        pass

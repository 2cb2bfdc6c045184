"""The worker's lm:// port (LMCache 0.5.6 server protocol) driven at the byte level with the codec's
client side; the real LMCache engine against it is in tests/lmcache/."""
from __future__ import annotations

import pathlib
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from curvine_py.core import lmproto
from curvine_py.procs import curvine_command
from curvine_py.transport.blocking import recv_exactly
from tests.harness import Cluster, random_bytes, wait_until
from tests.netns import network_namespaces, requires_netns


@pytest.fixture
def lm_cluster(tmp_path: pathlib.Path) -> Iterator[Cluster]:
    with Cluster(tmp_path, workers=2, worker_args=["--lm-port", "-1"]) as cluster:
        cluster.wait_for_live_workers(2)
        yield cluster


def lm_address(cluster: Cluster, index: int) -> tuple[str, int]:
    worker = cluster.workers[index]
    assert worker is not None
    host, port = worker.field("lm").rsplit(":", 1)
    return host, int(port)


def connect(address: tuple[str, int]) -> socket.socket:
    sock = socket.create_connection(address, timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def put(sock: socket.socket, key: str, data: bytes, meta: lmproto.ObjectMeta) -> None:
    sock.sendall(lmproto.encode_request(lmproto.Command.PUT, key, meta) + data)


def get(sock: socket.socket, key: str) -> tuple[lmproto.Reply, bytes]:
    sock.sendall(lmproto.encode_request(lmproto.Command.GET, key))
    reply = lmproto.parse_reply(recv_exactly(sock, lmproto.REPLY_SIZE))
    return reply, recv_exactly(sock, reply.meta.length) if reply.ok else b""


def exist(sock: socket.socket, key: str) -> bool:
    sock.sendall(lmproto.encode_request(lmproto.Command.EXIST, key))
    return lmproto.parse_reply(recv_exactly(sock, lmproto.REPLY_SIZE)).ok


def test_put_on_one_worker_is_read_on_every_other(lm_cluster: Cluster) -> None:
    writer, reader = connect(lm_address(lm_cluster, 0)), connect(lm_address(lm_cluster, 1))
    stored = {}
    for i in range(8):   # enough keys that both workers own some
        key = f"vllm@qwen2@1@0@{i:x}@bfloat16"
        data = random_bytes(256 * 1024 + i, seed=i)
        meta = lmproto.ObjectMeta(len(data), lmproto.MemoryFormat.KV_2LTD, lmproto.Dtype.BFLOAT16, (28, 2, 256, 512))
        put(writer, key, data, meta)
        stored[key] = (data, meta)
    for key, (data, meta) in stored.items():
        wait_until(lambda key=key: exist(reader, key), 5, f"{key} stored")   # PUT has no reply: poll
        reply, payload = get(reader, key)
        assert reply.ok and payload == data and reply.meta == meta
    owners = {lm_cluster.client().kv.owners(k)[0].worker_id for k in stored}
    assert len(owners) == 2, "keys were routed to both owners"


def test_misses_health_and_garbage(lm_cluster: Cluster) -> None:
    sock = connect(lm_address(lm_cluster, 0))
    reply, _ = get(sock, "never-stored")
    assert not reply.ok and reply.code is lmproto.ReturnCode.FAIL
    assert not exist(sock, "never-stored")
    sock.sendall(lmproto.encode_request(lmproto.Command.HEALTH, ""))
    assert recv_exactly(sock, lmproto.REPLY_SIZE) == lmproto.SUCCESS_REPLY
    sock.sendall(b"\x63" * lmproto.REQUEST_SIZE)        # unknown command: the connection is dropped
    assert sock.recv(1) == b""
    other = connect(lm_address(lm_cluster, 0))         # ...and the server keeps serving others
    assert not exist(other, "still-serving")


def test_oversized_put_is_refused_before_its_payload(tmp_path: pathlib.Path) -> None:
    with Cluster(tmp_path, workers=1, worker_args=["--lm-port", "-1", "--max-payload", "1048576"]) as cluster:
        sock = connect(lm_address(cluster, 0))
        meta = lmproto.ObjectMeta(8 << 20)
        sock.sendall(lmproto.encode_request(lmproto.Command.PUT, "too-big", meta))
        assert sock.recv(1) == b"", "closed without reading 8 MiB"
        assert not exist(connect(lm_address(cluster, 0)), "too-big")


def test_objects_of_changing_sizes_on_one_connection(lm_cluster: Cluster) -> None:
    """A session reuses one receive buffer: objects larger and smaller than the last one still
    come back whole and exactly their own length (never a stale tail of a bigger one)."""
    sock = connect(lm_address(lm_cluster, 0))
    sizes = [64 * 1024, (1 << 20) + 3, 100 * 1024, 7, (3 << 20) + 5, 4096]
    stored = {}
    for i, size in enumerate(sizes):
        key = f"vllm@sizes@1@0@{i:x}@bfloat16"
        data = random_bytes(size, seed=100 + i)
        meta = lmproto.ObjectMeta(size, lmproto.MemoryFormat.BINARY, lmproto.Dtype.UINT8, (size, 0, 0, 0))
        put(sock, key, data, meta)
        stored[key] = data
    for key in [*stored, *reversed(stored)]:
        reply, payload = get(sock, key)
        assert reply.ok and reply.meta.length == len(stored[key]) and payload == stored[key], key


# -- who may use the port (issue 11: LMCache's protocol has no credentials) ------------------------

TOKEN = "lm-test-token"


def test_the_port_is_node_local_by_default_even_in_a_token_cluster(tmp_path: pathlib.Path) -> None:
    with Cluster(tmp_path, workers=1, token=TOKEN, worker_args=["--lm-port", "-1"]) as cluster:
        host, port = lm_address(cluster, 0)
        assert host == "127.0.0.1"
        sock = connect((host, port))
        sock.sendall(lmproto.encode_request(lmproto.Command.HEALTH, ""))
        assert recv_exactly(sock, lmproto.REPLY_SIZE) == lmproto.SUCCESS_REPLY


@pytest.mark.parametrize("lm_host", ["0.0.0.0", "::"])
def test_a_reachable_port_in_a_token_cluster_is_refused_without_lm_insecure(
        tmp_path: pathlib.Path, lm_host: str) -> None:
    result = subprocess.run(curvine_command(
        "worker", "--master", "127.0.0.1:1", "--data-dir", str(tmp_path / "d"), "--token", TOKEN,
        "--lm-port", "-1", "--lm-host", lm_host), capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert "refusing to serve lm://" in result.stderr and "no credentials" in result.stderr
    assert "--lm-insecure" in result.stderr and TOKEN not in result.stderr


def test_a_bad_allow_list_is_refused_clearly(tmp_path: pathlib.Path) -> None:
    result = subprocess.run(curvine_command(
        "worker", "--master", "127.0.0.1:1", "--data-dir", str(tmp_path / "d"), "--lm-port", "-1",
        "--lm-allow", "10.0.0.0/8", "--lm-allow", "not-a-net"), capture_output=True, text=True, timeout=60,
        check=False)
    assert result.returncode == 2 and "--lm-allow 'not-a-net' is not a network" in result.stderr


PROBE = """
import socket, sys
from curvine_py.core import lmproto
sock = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
try:
    sock.sendall(lmproto.encode_request(lmproto.Command.HEALTH, ""))
    reply = sock.recv(lmproto.REPLY_SIZE)
except (BrokenPipeError, ConnectionResetError):   # closed at accept: EOF or RST
    reply = b""
print("served" if reply == lmproto.SUCCESS_REPLY else f"refused {reply!r}")
"""


@requires_netns()
def test_the_allow_list_refuses_a_peer_of_another_network_namespace(tmp_path: pathlib.Path) -> None:
    with network_namespaces(2) as lab, Cluster(tmp_path, workers=1, token=TOKEN, host=lab.root_address,
                                                worker_args=["--lm-port", "-1", "--lm-host", lab.root_address,
                                                             "--lm-insecure", "--lm-allow",
                                                             f"{lab[0].address}/32"]) as cluster:
        host, port = lm_address(cluster, 0)
        assert host == lab.root_address
        allowed = lab[0].run([sys.executable, "-c", PROBE, host, str(port)])
        other = lab[1].run([sys.executable, "-c", PROBE, host, str(port)])
        assert allowed.stdout.strip() == "served", allowed.stderr
        assert other.stdout.strip() == "refused b''", other.stderr
        local = subprocess.run([sys.executable, "-c", PROBE, host, str(port)], capture_output=True, text=True,
                               timeout=60, check=False)     # the root namespace is not allowed either
        assert local.stdout.strip() == "refused b''", local.stderr


@requires_netns()
def test_without_an_allow_list_lm_insecure_serves_every_namespace(tmp_path: pathlib.Path) -> None:
    with network_namespaces(1) as lab, Cluster(tmp_path, workers=1, token=TOKEN, host=lab.root_address,
                                                worker_args=["--lm-port", "-1", "--lm-host", lab.root_address,
                                                             "--lm-insecure"]) as cluster:
        host, port = lm_address(cluster, 0)
        probe = lab[0].run([sys.executable, "-c", PROBE, host, str(port)])
        assert probe.stdout.strip() == "served", probe.stderr

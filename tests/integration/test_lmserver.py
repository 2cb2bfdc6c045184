"""The worker's lm:// port (LMCache 0.5.6 server protocol) driven at the byte level with the codec's
client side; the real LMCache engine against it is in tests/lmcache/."""
from __future__ import annotations

import pathlib
import socket
from collections.abc import Iterator

import pytest

from curvine_py.core import lmproto
from curvine_py.transport.blocking import recv_exactly
from tests.harness import Cluster, random_bytes, wait_until


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

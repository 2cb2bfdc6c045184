"""The data-plane server under bad input and failure: unknown ops, malformed headers, oversized or
vanishing payloads, a missing token, a full disk, unreadable stored files, a stop with live
connections, and concurrent clients racing the evictor. Each case says what the peer gets and that
the store keeps nothing half-written. (test_worker_server.py has the ops and the wire helpers.)"""
from __future__ import annotations

import errno
import os
import socket
import threading

import pytest

from curvine_py.core import frames, layout
from curvine_py.proto.curvine.v1.common_pb2 import DURABLE
from curvine_py.proto.curvine.v1.data_pb2 import DataHeader
from curvine_py.worker.server import DataServer, WorkerState
from curvine_py.worker.store import Store
from tests.harness import wait_until
from tests.unit import test_worker_server as wire
from tests.unit.test_worker_server import MiB, Op, WireClient, assert_closed, client_verifies

# test_worker_server.py's fixtures, found by pytest under these names.
store, state, server, client = wire.store, wire.state, wire.server, wire.client


def test_unknown_op_gets_an_error_then_close_and_others_keep_working(server: tuple[str, int]) -> None:
    with WireClient(server) as bad, WireClient(server) as good:
        body = DataHeader(key="x").SerializeToString()
        bad.sock.sendall(frames.PREFIX.pack(frames.MAGIC, frames.VERSION, 77, 42, len(body), 0) + body)
        code, request_id, reply = bad.raw_reply()
        assert code == 77 | frames.RESPONSE_BIT and request_id == 42 and reply.errno == errno.EPROTO
        assert_closed(bad.sock)
        good.put("still", b"serving")
        assert good.get("still")[1] == b"serving"


def test_malformed_header_and_bad_magic(server: tuple[str, int]) -> None:
    with WireClient(server) as c:
        garbage = b"\xff\xff\xff\xff"
        c.sock.sendall(frames.PREFIX.pack(frames.MAGIC, frames.VERSION, int(Op.GET), 3, len(garbage), 0) + garbage)
        code, request_id, reply = c.raw_reply()
        assert code == int(Op.GET) | frames.RESPONSE_BIT and request_id == 3 and reply.errno == errno.EPROTO
        assert_closed(c.sock)
    with WireClient(server, hello=False) as c:
        c.sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        _, _, reply = c.raw_reply()
        assert reply.errno == errno.EPROTO
        assert_closed(c.sock)
    with WireClient(server) as c:
        assert c.call(Op.PING, DataHeader()).errno == 0


def test_payload_on_an_op_without_payload_is_a_protocol_error(server: tuple[str, int]) -> None:
    with WireClient(server) as c:
        body = DataHeader(key="k").SerializeToString()
        c.sock.sendall(frames.PREFIX.pack(frames.MAGIC, frames.VERSION, int(Op.GET), 5, len(body), 10) + body)
        _, request_id, reply = c.raw_reply()
        assert request_id == 5 and reply.errno == errno.EPROTO
        assert_closed(c.sock)


def test_oversized_payload_is_refused_before_it_is_read(server: tuple[str, int], store: Store) -> None:
    with WireClient(server) as c:
        header = DataHeader(key="huge").SerializeToString()
        # Only the prefix and header are sent: the reply must come without any payload byte.
        c.sock.sendall(frames.PREFIX.pack(frames.MAGIC, frames.VERSION, int(Op.PUT), 8, len(header),
                                          1 << 40) + header)
        code, request_id, reply = c.raw_reply()
        assert code == int(Op.PUT) | frames.RESPONSE_BIT and request_id == 8
        assert reply.errno == errno.EFBIG
        assert_closed(c.sock)
    assert store.dirs[0].reserved == 0 and os.listdir(os.path.join(store.dirs[0].path, "tmp")) == []
    with WireClient(server) as c:
        assert c.call(Op.PING, DataHeader()).errno == 0


def test_peer_vanishing_mid_payload_leaves_nothing(server: tuple[str, int], store: Store,
                                                   state: WorkerState) -> None:
    c = WireClient(server)
    c.sock.sendall(frames.encode(Op.PUT, 1, DataHeader(key="half"), 4 * MiB) + b"x" * MiB)
    c.close()
    tmp = os.path.join(store.dirs[0].path, "tmp")

    def put_handled() -> bool:
        # The PUT's duration is observed after its handler returned, i.e. after it met the EOF and
        # cleaned up: polling the end state alone could look before the server even started.
        count = state.metrics.registry.get_sample_value("curvine_operation_duration_seconds_count",
                                                        {"op": "put"})
        return count == 1

    wait_until(put_handled, timeout=10, what="the half-sent PUT handled")
    assert store.dirs[0].reserved == 0 and os.listdir(tmp) == []
    with WireClient(server) as other:
        assert other.get("half")[0].found is False
    assert os.listdir(tmp) == []


def test_token_is_required(store: Store, state: WorkerState) -> None:
    srv = DataServer(store, state, host="127.0.0.1", port=0, token="s3cret", max_payload=MiB)
    address = srv.start()
    try:
        with WireClient(address, hello=False) as c:
            reply, _ = c.exchange(Op.HELLO, DataHeader(token="wrong"))
            assert reply.errno == errno.EACCES
            assert_closed(c.sock)
        with WireClient(address, hello=False) as c:
            reply, _ = c.exchange(Op.GET, DataHeader(key="k"))
            assert reply.errno == errno.EACCES
            assert_closed(c.sock)
        with WireClient(address, token="s3cret") as c:
            assert c.put("k", b"v").errno == 0
    finally:
        srv.stop()


def test_no_space_is_enospc_and_connection_survives(tmp_path: os.PathLike[str], state: WorkerState) -> None:
    with Store([(os.path.join(tmp_path, "small"), 2 * MiB)]) as small:
        srv = DataServer(small, state, host="127.0.0.1", port=0, token="", max_payload=64 * MiB)
        address = srv.start()
        try:
            with WireClient(address) as c:
                reply, _ = c.exchange(Op.PUT, DataHeader(key="big", storage_class=DURABLE), b"z" * (3 * MiB))
                assert reply.errno == errno.ENOSPC
                assert c.get("big")[0].found is False
                assert c.put("fits", b"y" * MiB, storage_class=DURABLE).errno == 0
        finally:
            srv.stop()


def test_stop_closes_live_connections(store: Store, state: WorkerState) -> None:
    srv = DataServer(store, state, host="127.0.0.1", port=0, token="", max_payload=MiB)
    address = srv.start()
    c = WireClient(address)
    srv.stop()
    c.sock.settimeout(5)
    assert_closed(c.sock)
    c.close()
    with pytest.raises(OSError):
        socket.create_connection(address, timeout=1).close()


def test_unreadable_stored_header_is_a_kv_miss_and_a_block_eio(client: WireClient, store: Store) -> None:
    client.put("wrecked", b"w" * 100)
    client.call(Op.WRITE_BLOCK, DataHeader(block_id=0x51), b"b" * 100)
    for sub, name in (("kv", layout.object_file_name("wrecked")), ("blocks", layout.block_file_name(0x51))):
        path = os.path.join(store.dirs[0].path, sub, layout.shard_dir(name), name)
        with open(path, "r+b") as fh:
            fh.write(b"JUNK")   # the magic
    reply, payload = client.get("wrecked")
    assert reply.found is False and payload == b""
    reply, _ = client.exchange(Op.READ_BLOCK, DataHeader(block_id=0x51))
    assert reply.errno == errno.EIO
    assert store.stats().objects == 0 and store.stats().blocks == 0
    assert store.take_reports() == ([], [0x51])
    assert client.call(Op.PING, DataHeader()).errno == 0


def test_concurrent_clients_with_eviction_never_see_wrong_bytes(tmp_path: os.PathLike[str],
                                                                  state: WorkerState) -> None:
    from curvine_py.worker.evictor import Evictor

    def value(key: str) -> bytes:
        seed = int(key[1:])
        return bytes([seed % 251]) * (512 * 1024 + seed * 10_000)

    with Store([(os.path.join(tmp_path, "busy"), 4 * MiB)]) as busy:
        evictor = Evictor(busy, high=0.8, low=0.5, interval_s=0.005)
        evictor.start()
        srv = DataServer(busy, state, host="127.0.0.1", port=0, token="", max_payload=8 * MiB)
        address = srv.start()
        failures: list[str] = []

        def worker(seed: int) -> None:
            try:
                with WireClient(address) as c:
                    for i in range(60):
                        key = f"k{(seed * 7 + i) % 24}"
                        action = (seed + i) % 3
                        if action == 0:
                            c.put(key, value(key))
                        elif action == 1:
                            reply, payload = c.get(key)
                            if reply.found and (payload != value(key) or not client_verifies(payload, reply)):
                                failures.append(f"wrong bytes for {key}")
                        else:
                            c.call(Op.DELETE, DataHeader(key=key))
            except Exception as exc:  # noqa: BLE001 - collected and asserted below
                failures.append(repr(exc))

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        srv.stop()
        evictor.stop()
        assert failures == []
        on_disk = sum(os.path.getsize(os.path.join(root, f))
                      for root, _, files in os.walk(os.path.join(busy.dirs[0].path, "kv")) for f in files)
        assert busy.stats().used == on_disk and busy.dirs[0].reserved == 0
        assert busy.stats().evictions > 0
        wait_until(lambda: busy.dirs[0].reaping == 0, 30.0, "the reaper's unlinks")
        assert os.listdir(os.path.join(busy.dirs[0].path, "tmp")) == []

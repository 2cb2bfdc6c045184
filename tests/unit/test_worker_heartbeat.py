"""Registration and heartbeats against an in-process fake master (a sync gRPC server on port 0):
what the worker sends, what it applies, and how it survives a master outage."""
from __future__ import annotations

import logging
import pathlib
import random
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from curvine_py.proto.curvine.v1 import master_pb2 as mpb
from curvine_py.proto.curvine.v1.common_pb2 import CACHE
from curvine_py.proto.curvine.v1.master_pb2_grpc import MasterServicer, add_MasterServicer_to_server
from curvine_py.rpc.auth import TOKEN_METADATA
from curvine_py.worker.evictor import Evictor
from curvine_py.worker.heartbeat import Advertised, Heartbeater
from curvine_py.worker.server import WorkerState
from curvine_py.worker.store import Store

MiB = 1 << 20


class FakeMaster(MasterServicer):
    def __init__(self) -> None:
        self.registrations: list[mpb.RegisterWorkerRequest] = []
        self.heartbeats: list[mpb.HeartbeatRequest] = []
        self.metadata: list[dict[str, str]] = []
        self.epoch = 7
        self.delete_on_register: list[int] = []
        self.delete_on_heartbeat: list[int] = []
        self.reregister = False
        self.changed = threading.Condition()

    def RegisterWorker(self, request: mpb.RegisterWorkerRequest, context: Any) -> mpb.RegisterWorkerReply:
        with self.changed:
            self.registrations.append(request)
            self.metadata.append(dict(context.invocation_metadata()))
            self.changed.notify_all()
        return mpb.RegisterWorkerReply(cluster_id="c1", epoch=self.epoch, heartbeat_interval_ms=20,
                                       lease_ms=1000, delete_block_ids=self.delete_on_register)

    def Heartbeat(self, request: mpb.HeartbeatRequest, context: Any) -> mpb.HeartbeatReply:
        with self.changed:
            self.heartbeats.append(request)
            self.changed.notify_all()
        reregister, self.reregister = self.reregister, False
        deletes, self.delete_on_heartbeat = self.delete_on_heartbeat, []
        return mpb.HeartbeatReply(epoch=self.epoch, reregister=reregister, delete_block_ids=deletes)

    def wait_for(self, what: str, count: int, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        with self.changed:
            while len(getattr(self, what)) < count:
                left = deadline - time.monotonic()
                assert left > 0, f"timed out waiting for {count} {what}"
                self.changed.wait(left)


def serve(fake: FakeMaster, port: int = 0) -> tuple[grpc.Server, int]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    add_MasterServicer_to_server(fake, server)  # type: ignore[no-untyped-call]
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    return server, bound


@pytest.fixture
def store(tmp_path: pathlib.Path) -> Iterator[Store]:
    with Store([(str(tmp_path / "d"), 64 * MiB)]) as s:
        yield s


def advertised() -> Advertised:
    return Advertised(worker_id="w1", host="127.0.0.1", port=4242, unix_socket="/x/worker.sock", node="n1")


def test_register_sends_identity_usage_and_inventory(store: Store) -> None:
    store.write_block(1, b"a" * 1000)
    store.write_block(2, b"b" * 1000)
    store.put_object("kv", b"c")
    fake = FakeMaster()
    fake.delete_on_register = [2, 99]
    server, port = serve(fake)
    state = WorkerState("w1")
    beat = Heartbeater(store, state, advertised(), master=f"127.0.0.1:{port}", token="tok")
    used_before = store.stats().used
    try:
        beat.register()
        request = fake.registrations[0]
        info = request.info
        assert (info.worker_id, info.host, info.port, info.unix_socket, info.node) == \
            ("w1", "127.0.0.1", 4242, "/x/worker.sock", "n1")
        assert info.capacity == 64 * MiB and info.used == used_before
        assert info.available == info.capacity - info.used
        assert (info.blocks, info.objects) == (2, 1)
        assert sorted(request.block_ids) == [1, 2]
        assert fake.metadata[0][TOKEN_METADATA] == "Bearer tok"
        assert state.epoch == 7 and beat.registered.is_set() and beat.interval_s == 0.02
        assert store.block_ids() == [1]            # released block deleted, unknown id ignored
    finally:
        beat.stop()
        server.stop(None)


def test_heartbeat_reports_evictions_and_applies_deletes(tmp_path: pathlib.Path) -> None:
    now = [5_000]
    store = Store([(str(tmp_path / "d"), 64 * MiB)], clock=lambda: now[0])
    store.open()
    fake = FakeMaster()
    server, port = serve(fake)
    state = WorkerState("w1")
    beat = Heartbeater(store, state, advertised(), master=f"127.0.0.1:{port}", token="")
    evictor = Evictor(store, high=0.9, low=0.5)
    try:
        beat.register()
        store.write_block(10, b"x", storage_class=CACHE, ttl_ms=1)
        store.write_block(11, b"y")
        now[0] += 1
        assert evictor.run_once() == 1
        fake.epoch = 8
        fake.delete_on_heartbeat = [11]
        beat.beat()
        hb = fake.heartbeats[-1]
        assert list(hb.evicted_block_ids) == [10] and hb.evictions == 1 and hb.worker_id == "w1"
        assert state.epoch == 8 and not store.contains_block(11)
        beat.beat()
        assert list(fake.heartbeats[-1].evicted_block_ids) == []   # reported once
    finally:
        beat.stop()
        server.stop(None)
        store.close()


def test_reports_survive_a_failed_heartbeat(store: Store) -> None:
    fake = FakeMaster()
    server, port = serve(fake)
    beat = Heartbeater(store, WorkerState("w1"), advertised(), master=f"127.0.0.1:{port}", token="",
                       rpc_timeout_s=0.5)
    try:
        beat.register()
        server.stop(None).wait()
        store.write_block(5, b"bad")
        store.drop_bad(store.block_name(5))
        with pytest.raises(grpc.RpcError):
            beat.beat()
        assert store.take_reports() == ([], [5])
        store.return_reports([], [5])
        server, _ = serve(fake, port)
        deadline = time.monotonic() + 10
        while True:   # the channel reconnects within its (capped) backoff
            try:
                beat.beat()
                break
            except grpc.RpcError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        assert list(fake.heartbeats[-1].bad_block_ids) == [5]
    finally:
        beat.stop()
        server.stop(None)


class Monotonic:
    """A fake monotonic clock in seconds."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_steps_back_off_log_rate_limited_and_recover_with_a_fake_clock(
        store: Store, caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeMaster()
    server, port = serve(fake)
    server.stop(None).wait()                      # a port that nobody serves yet: refused at once
    seconds = Monotonic()
    beat = Heartbeater(store, WorkerState("w1"), advertised(), master=f"127.0.0.1:{port}", token="",
                       rpc_timeout_s=0.5, clock=seconds, rng=random.Random(7), log_interval_s=10)
    caplog.set_level(logging.INFO, logger="curvine_py.worker.heartbeat")
    try:
        delays = []
        for _ in range(12):
            delays.append(beat.step())
            seconds.now += delays[-1]
        caps = [min(0.1 * 2 ** i, 5.0) for i in range(12)]
        assert all(cap / 2 <= delay <= cap for delay, cap in zip(delays, caps, strict=True))
        assert not beat.registered.is_set() and beat.failures == 12
        failed = [r for r in caplog.records if "registration failed" in r.getMessage()]
        elapsed = seconds.now - 1000.0
        assert 1 <= len(failed) <= 1 + elapsed // 10 < 12     # throttled: not a line per failure
        assert "(1 in a row, 0 similar lines suppressed)" in failed[0].getMessage()
        server, _ = serve(fake, port)
        deadline = time.monotonic() + 15
        while beat.step() != 0.02:                # the channel reconnects within its capped backoff
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert beat.registered.is_set() and beat.failures == 0 and len(fake.registrations) == 1
        assert any("reachable again" in r.getMessage() for r in caplog.records)
        assert beat.step() == 0.02 and len(fake.heartbeats) == 1
        fake.reregister = True
        assert beat.step() == 0.0                 # told to register again: at once
        assert beat.step() == 0.02 and len(fake.registrations) == 2
    finally:
        beat.stop()
        server.stop(None)


def test_the_loop_thread_registers_and_beats(store: Store) -> None:
    fake = FakeMaster()
    server, port = serve(fake)
    beat = Heartbeater(store, WorkerState("w1"), advertised(), master=f"127.0.0.1:{port}", token="")
    beat.start()
    try:
        assert beat.registered.wait(15)
        fake.wait_for("heartbeats", 2)
    finally:
        beat.stop()
        server.stop(None)

"""Standby masters on one PostgreSQL database (issue 12): the second master stands by and sends
callers to the leader; kill -9 of the leader under a running create/write/read loop of a
client and a FUSE mount, both given the list of masters: the standby takes over by itself, the
operations fail for a while (each within its deadline) and then succeed again without a remount,
no acknowledged create or commit is lost and no byte read is wrong; the worker moves by itself."""
from __future__ import annotations

import pathlib
import threading

import grpc
import pytest

from curvine_py.client import CurvineClient
from curvine_py.master.follower import LEADER_METADATA_KEY
from curvine_py.procs import RoleProcess, curvine_command, start
from curvine_py.proto.curvine.v1 import master_pb2 as pb
from curvine_py.proto.curvine.v1.master_pb2_grpc import MasterStub
from tests import pgserver
from tests.fuse.mounts import Mount
from tests.integration.ha_loops import Loop, start_loops
from tests.harness import FAST_TIMERS, wait_until




def start_master(root: pathlib.Path, name: str, url: str, *, ready: str) -> RoleProcess:
    return start(name, curvine_command("master", "--data-dir", str(root / name), "--port", "0", "--meta", url,
                                       *FAST_TIMERS), ready_prefix=ready)


def port_of(process: RoleProcess) -> str:
    return process.address.rsplit(":", 1)[1]


def test_standby_refuses_and_names_the_leader_then_takes_over(tmp_path: pathlib.Path,
                                                              pg: pgserver.PgServer) -> None:
    url = pg.url("standby")
    first = start_master(tmp_path, "a", url, ready="master=")
    second = start_master(tmp_path, "b", url, ready="standby=")
    try:
        with grpc.insecure_channel(second.address) as channel, pytest.raises(grpc.RpcError) as refused:
            MasterStub(channel).StatFs(pb.StatFsRequest(), timeout=5)  # type: ignore[no-untyped-call]
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert dict(refused.value.trailing_metadata())[LEADER_METADATA_KEY] == first.address
        # A client given the standby first goes to the leader by itself.
        client = CurvineClient(f"{second.address},{first.address}")
        client.fs.mkdir("/made-through-the-list")
        first.kill()
        # The standby takes the lock within its retry (0.5 s) once the old session is gone, and
        # then serves on the port it already held.
        wait_until(lambda: any(line.startswith("master=") for line in second.tail), 30, "the takeover")
        assert [e.path for e in client.fs.ls("/")] == ["/made-through-the-list"]
        client.close()
    finally:
        first.kill()
        second.stop()


def test_leader_killed_under_a_client_and_a_mount_loses_nothing(tmp_path: pathlib.Path,
                                                                 pg: pgserver.PgServer) -> None:
    url = pg.url("failover")
    first = start_master(tmp_path, "a", url, ready="master=")
    second = start_master(tmp_path, "b", url, ready="standby=")
    masters = f"{first.address},{second.address}"
    (tmp_path / "w0").mkdir()
    worker = start("worker0", curvine_command("worker", "--master", masters, "--data-dir", str(tmp_path / "w0"),
                                              "--port", "0", "--node", "node0"), ready_prefix="worker=")
    mount = Mount(masters, tmp_path / "mnt", args=["--node", "node0"])
    client = CurvineClient(masters, node="node0", rpc_timeout_s=3.0, membership_refresh_s=0.5)
    stop = threading.Event()
    loops = (Loop("client"), Loop("mount"))
    try:
        wait_until(lambda: sum(w.live for w in client.master.membership().workers) == 1, 20, "the worker")
        client.fs.mkdir("/ha")
        with mount:
            threads = start_loops(client, mount.path, "/ha", loops, stop)
            try:
                wait_until(lambda: all(loop.done >= 10 for loop in loops), 60, "operations before the kill")
                first.kill()
                before = [loop.done for loop in loops]
                # Both ways work again, without a remount or a new client.
                wait_until(lambda: all(loop.done >= b + 10 for loop, b in zip(loops, before, strict=True)), 90,
                           "operations after the takeover")
            finally:
                stop.set()
                for thread in threads:
                    thread.join()
            assert any(line.startswith("master=") for line in second.tail)
            for loop in loops:
                assert loop.wrong == [], (loop.name, loop.wrong)
                # Each failure came within its deadline, never a hang (client 3 s; the mount's
                # default deadline bounds its operations).
                assert all(elapsed < 35 for elapsed, _ in loop.failures), (loop.name, loop.failures)
            # Every acknowledged create and commit is there with its bytes, read through a fresh
            # client that only knows the new leader.
            fresh = CurvineClient(second.address)
            for loop in loops:
                for path, data in loop.acknowledged.items():
                    with fresh.fs.open(path, "rb") as f:
                        assert f.read() == data, path
            assert list(fresh.master.fsck().problems) == []
            fresh.close()
    finally:
        stop.set()
        client.close()
        worker.stop()
        first.kill()
        second.stop()

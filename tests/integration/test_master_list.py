"""A list of masters (issue 12, standby masters): clients, workers and mounts find the leader.

The leader is the real master process (tests/harness.py Cluster). The other masters are small real
gRPC servers here that keep the followers' side of the contract (rpc/leader.py): every call is
answered UNAVAILABLE with the trailing metadata `curvine-leader` = the leader's HOST:PORT ("" when
unknown), details "not the leader; the leader is HOST:PORT". Timing is asserted only through an
injected clock; a hang would fail through pytest's timeout.
"""
from __future__ import annotations

import pathlib
import socket
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Self

import grpc
import pytest

from curvine_py.client import CurvineClient
from curvine_py.client.master import MasterClient
from curvine_py.config import parse_master_list
from curvine_py.core.domain import FileType, NewNode
from curvine_py.core.errors import InvalidArgument, Timeout, Unavailable
from curvine_py.csi import main as csi_main
from curvine_py.fuse import options as mount_options
from curvine_py.fuse.mountpoint import is_mounted
from curvine_py.master.follower import refusal
from curvine_py.proto.csi.v1 import csi_pb2 as csi
from curvine_py.proto.curvine.v1 import master_pb2 as pb
from curvine_py.proto.curvine.v1.master_pb2_grpc import MasterStub
from curvine_py.rpc.channel import one_channel
from curvine_py.rpc.leader import PROBE_METHOD, LeaderChannel
from tests.csi.plugin import Plugin, capability, mount_pids
from tests.faketime import FakeTime
from tests.fuse.mounts import Mount
from tests.harness import Cluster, wait_until
from tests.integration.test_cli import cli

Behaviour = Callable[[grpc.ServicerContext], bytes]


class FakeMaster:
    """A real gRPC server answering every method with `behaviour` (the request bytes unread);
    it records the methods called and the deadline each call arrived with."""

    def __init__(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour
        self.calls: list[str] = []
        self.remaining: list[float] = []
        self._server = grpc.server(ThreadPoolExecutor(4))
        self._server.add_generic_rpc_handlers((_Handler(self),))
        self.address = f"127.0.0.1:{self._server.add_insecure_port('127.0.0.1:0')}"
        self._server.start()

    def stop(self) -> None:
        self._server.stop(None)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()


class _Handler(grpc.GenericRpcHandler):
    def __init__(self, master: FakeMaster) -> None:
        self.master = master

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler[Any, Any]:
        def answer(_request: bytes, context: grpc.ServicerContext) -> bytes:
            self.master.calls.append(handler_call_details.method)
            self.master.remaining.append(context.time_remaining())
            return self.master.behaviour(context)
        return grpc.unary_unary_rpc_method_handler(answer)


class Follower(FakeMaster):
    """The followers' contract; `hint` may change while it runs (a new leader elected)."""

    def __init__(self, hint: str = "") -> None:
        self.hint = hint
        super().__init__(self._refuse)

    def _refuse(self, context: grpc.ServicerContext) -> bytes:
        text, metadata = refusal(self.hint)      # the real follower's answer (master/follower.py)
        context.set_trailing_metadata(metadata)
        context.abort(grpc.StatusCode.UNAVAILABLE, text)
        raise AssertionError("unreachable")




def write(client: CurvineClient, path: str, data: bytes) -> None:
    with client.fs.open(path, "wb") as f:
        f.write(data)


def read(client: CurvineClient, path: str) -> bytes:
    with client.fs.open(path, "rb") as f:
        return f.read()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def follower(cluster1: Cluster) -> Iterator[Follower]:
    with Follower(cluster1.master_address) as f:
        yield f


# -- lists -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "message"), [
    ("", "no master address given"),
    ("a:1,,b:2", "entry 2 is empty"),
    ("a:1,", "entry 2 is empty"),
    ("a:x", "the port must be a number, not 'x'"),
    ("a:", "the port must be a number, not ''"),
    ("a:1,b:70000", "port 70000 is not in 1-65535"),
    ("a:0", "port 0 is not in 1-65535"),
    ("a:1,b:2,a:1", "a:1 is given twice"),
    ("a,a:8995", "a:8995 is given twice"),
    ("::1", "write an IPv6 address as [ADDRESS]:PORT"),
])
def test_bad_lists_are_refused_everywhere_a_master_is_taken(text: str, message: str, tmp_path: pathlib.Path) -> None:
    with pytest.raises(InvalidArgument, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_master_list(text)
    with pytest.raises(InvalidArgument, match="port|entry|given|IPv6|no master"):
        CurvineClient(text)
    if text:
        with pytest.raises(InvalidArgument, match=message.split(",")[0].replace("[", r"\[").replace("]", r"\]")):
            mount_options.parse(["--master", text, str(tmp_path / "mnt")], env={})
        with pytest.raises(InvalidArgument, match="port|entry|given|IPv6"):
            csi_main.parse(["--endpoint", "unix:///x.sock", "--node-id", "n", "--node", "--master", text])


def test_good_lists_are_normalized_and_one_address_stays_one() -> None:
    assert parse_master_list("a") == ("a:8995",)
    assert parse_master_list(" a:1 , b ,[::1]:7") == ("a:1", "b:8995", "[::1]:7")
    single = MasterClient("127.0.0.1:1")
    try:
        assert single.address == single.leader == "127.0.0.1:1"
        assert isinstance(single._channel, grpc.Channel)    # one address: the plain channel, as before
    finally:
        single.close()


def test_cli_tools_take_a_list_and_refuse_a_bad_one(cluster1: Cluster, follower: Follower) -> None:
    masters = f"{follower.address},{cluster1.master_address}"
    assert cli("fs", "--master", masters, "mkdir", "-p", "/listed").returncode == 0
    listing = cli("fs", "ls", "/", env={"CURVINE_MASTER": masters})
    assert listing.returncode == 0 and b"/listed" in listing.stdout
    bad = cli("fs", "--master", f"{cluster1.master_address},,x:1", "ls", "/")
    assert bad.returncode == 1 and b"entry 2 is empty" in bad.stderr
    worker = cli("worker", "--master", "a:1,a:1", "--data-dir", "/nonexistent")
    assert worker.returncode == 2 and b"a:1 is given twice" in worker.stderr


# -- finding the leader ------------------------------------------------------------------------
def test_a_follower_first_sends_the_client_to_the_leader_and_it_stays_there(
        cluster1: Cluster, follower: Follower) -> None:
    with CurvineClient(f"{follower.address},{cluster1.master_address}", membership_refresh_s=0.2) as client:
        client.fs.mkdir("/d")
        for i in range(5):
            write(client, f"/d/f{i}", b"x" * 1000 * i)
        assert [read(client, f"/d/f{i}") for i in range(5)] == [b"x" * 1000 * i for i in range(5)]
        assert client.master.leader == cluster1.master_address
    assert len(follower.calls) == 1          # only the first call met the follower


def test_a_follower_that_knows_no_leader_and_a_dead_port_are_passed_over(cluster1: Cluster) -> None:
    dead = f"127.0.0.1:{free_port()}"
    with Follower("") as unaware, \
            CurvineClient(f"{dead},{unaware.address},{cluster1.master_address}") as client:
        write(client, "/f", b"hello")
        assert read(client, "/f") == b"hello"
        assert client.master.leader == cluster1.master_address
        seen = len(unaware.calls)
        client.fs.stat("/f")
        assert len(unaware.calls) == seen == 1


def test_only_followers_fail_unavailable_within_the_deadline() -> None:
    fake = FakeTime()
    with Follower("") as a, Follower("") as b:
        channel = LeaderChannel([a.address, b.address], one_channel, clock=fake.clock, sleep=fake.sleep)
        try:
            with pytest.raises(grpc.RpcError) as caught:
                MasterStub(channel).GetMembership(pb.Empty(), timeout=2.0)  # type: ignore[no-untyped-call]
        finally:
            channel.close()
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    details = caught.value.details() or ""
    assert f"no leader among masters {a.address},{b.address} within 2 s" in details, details
    assert "not the leader" in details
    assert sum(fake.slept) <= 2.0 + 1e-9                  # the backoff never outlasts the deadline
    assert max(fake.slept) <= 0.5 and len(fake.slept) >= 3
    assert len(a.calls) >= 3 and len(b.calls) >= 3           # it went round, with pauses
    # No attempt got more than what was left of the call's deadline (gRPC rounds its timeout header up).
    assert max(a.remaining + b.remaining) <= 2.0 + 0.05


def test_followers_pointing_at_each_other_end_in_unavailable_too() -> None:
    with Follower() as a, Follower() as b:
        a.hint, b.hint = b.address, a.address
        master = MasterClient(f"{a.address},{b.address}", timeout_s=0.5)
        try:
            with pytest.raises(Unavailable, match="no leader among masters"):
                master.membership()
        finally:
            master.close()
    assert a.calls and b.calls


def test_a_call_lost_during_the_leaders_work_is_not_sent_again() -> None:
    """A connection that broke mid-call may have carried out the call: Unavailable, as with one
    master, and no second master sees it; the next call finds the one that answers."""
    entered, release = threading.Event(), threading.Event()

    def slow(_context: grpc.ServicerContext) -> bytes:
        entered.set()
        release.wait(10)
        return b""

    failure: list[BaseException] = []
    with FakeMaster(slow) as leader, FakeMaster(lambda _c: b"") as other:
        master = MasterClient(f"{leader.address},{other.address}", timeout_s=10)
        try:
            def create() -> None:
                try:
                    master.create(NewNode(parent=1, name="x", type=FileType.REGULAR, mode=0o644))
                except BaseException as exc:   # noqa: BLE001 - examined below
                    failure.append(exc)
            caller = threading.Thread(target=create)
            caller.start()
            assert entered.wait(10)
            leader.stop()                    # the leader goes away with the call in its hands
            release.set()
            caller.join(10)
            assert len(failure) == 1 and isinstance(failure[0], Unavailable), failure
            assert other.calls == []
            master.membership()              # the next call: the old leader is gone, the other answers
            # The lost call made the old leader suspect: the next call first asked the other who
            # leads (the probe, a GetMembership), then went there.
            assert other.calls == [PROBE_METHOD, "/curvine.v1.Master/GetMembership"]
            assert master.leader == other.address
        finally:
            master.close()


def test_a_silent_leader_is_left_for_the_one_the_others_name_once_they_do() -> None:
    """Issue 24: the leader hangs (its calls time out). The next call asks the others who leads
    first; while the follower still names the silent leader it asks again, and it goes to the new
    leader as soon as one is named, within the call's own deadline."""
    hung = threading.Event()

    def silent(_context: grpc.ServicerContext) -> bytes:
        hung.wait(5)
        return b""

    with FakeMaster(silent) as leader, FakeMaster(lambda _c: b"") as new, Follower() as other:
        other.hint = leader.address                     # the database still names the silent leader
        master = MasterClient(f"{leader.address},{other.address}", timeout_s=1.0)
        try:
            with pytest.raises(Timeout):
                master.membership()
            threading.Timer(0.3, lambda: setattr(other, "hint", new.address)).start()   # the takeover
            master.membership()
            assert master.leader == new.address
            assert new.calls == ["/curvine.v1.Master/GetMembership"]
            assert len(leader.calls) == 1               # nothing more was sent to the silent one
        finally:
            hung.set()
            master.close()


# -- the leader moves ----------------------------------------------------------------------------
def test_client_and_worker_follow_a_leader_restarted_on_another_port(tmp_path: pathlib.Path) -> None:
    cluster = Cluster(tmp_path, workers=1)
    try:
        old = cluster.start_master().address
        with Follower(old) as follower:
            masters = f"{follower.address},{old}"
            cluster.start_worker(0, extra=["--master", masters])
            client = CurvineClient(masters, membership_refresh_s=0.2)
            try:
                write(client, "/before", b"kept" * 1000)
                cluster.kill_master()
                new = cluster.start_master(free_port()).address
                follower.hint = new              # a follower now names the new leader
                # The first call after the move finds it, within its own deadline (5 s).
                assert read(client, "/before") == b"kept" * 1000
                assert client.master.leader == new
                # The worker registers with the new leader by itself (its heartbeat follows the hint).
                wait_until(lambda: [w.live for w in client.master.membership().workers] == [True], 15,
                           "the worker registered with the new leader")
                write(client, "/after", b"new" * 1000)
                assert read(client, "/after") == b"new" * 1000
            finally:
                client.close()
    finally:
        cluster.stop()


def test_a_mount_given_a_follower_first_works(cluster1: Cluster, follower: Follower, tmp_path: pathlib.Path) -> None:
    with Mount(f"{follower.address},{cluster1.master_address}", tmp_path / "mnt") as mount:
        (mount.path / "f").write_bytes(b"through the leader")
        assert (mount.path / "f").read_bytes() == b"through the leader"
        assert sorted(p.name for p in mount.path.iterdir()) == ["f"]
    assert len(follower.calls) == 1


def test_the_csi_driver_passes_the_list_on_to_its_mounts(cluster1: Cluster, follower: Follower,
                                                        tmp_path: pathlib.Path) -> None:
    masters = f"{follower.address},{cluster1.master_address}"
    staging = tmp_path / "staging"
    staging.mkdir()
    with Plugin(tmp_path / "plugin", masters) as plugin:
        volume_id = plugin.controller.CreateVolume(csi.CreateVolumeRequest(
            name="pvc-listed", volume_capabilities=[capability()])).volume.volume_id
        plugin.node.NodeStageVolume(csi.NodeStageVolumeRequest(
            volume_id=volume_id, staging_target_path=str(staging), volume_capability=capability()))
        try:
            assert is_mounted(str(staging))
            [pid] = mount_pids(staging)
            argv = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            assert argv[argv.index(b"--master") + 1] == masters.encode()
            (staging / "f").write_bytes(b"via the list")
            assert read(cluster1.client(), "/volumes/pvc-listed/f") == b"via the list"
        finally:
            plugin.node.NodeUnstageVolume(csi.NodeUnstageVolumeRequest(
                volume_id=volume_id, staging_target_path=str(staging)))
        assert not is_mounted(str(staging))

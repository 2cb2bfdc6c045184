"""The master as a real process (`curvine-py master --port 0`), spoken to with the generated stubs:
every RPC once over the wire with its error codes, the token, durability across kill -9, leases,
the process contract (ready line, master.addr, clean SIGTERM, refusals)."""
from __future__ import annotations

import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import pytest

from curvine_py.procs import RoleProcess, curvine_command, start
from curvine_py.proto.curvine.v1 import common_pb2 as cpb
from curvine_py.proto.curvine.v1 import master_pb2 as pb
from curvine_py.proto.curvine.v1.master_pb2_grpc import MasterStub
from curvine_py.rpc.auth import call_metadata

ROOT = 1
DEADLINE = 10.0


def start_master(data_dir: pathlib.Path, *extra: str) -> RoleProcess:
    return start("master", curvine_command("master", "--data-dir", str(data_dir), "--port", "0", *extra),
                 ready_prefix="master=")


class Master:
    """A stub with deadlines and (optionally) the token on every call."""

    def __init__(self, address: str, token: str = "") -> None:
        self.channel = grpc.insecure_channel(address)
        self.stub = MasterStub(self.channel)
        self.metadata = call_metadata(token)

    def __getattr__(self, name: str) -> Callable[[Any], Any]:
        method = getattr(self.stub, name)

        def call(request: Any) -> Any:
            return method(request, timeout=DEADLINE, metadata=self.metadata)

        return call

    def close(self) -> None:
        self.channel.close()


@pytest.fixture
def proc(tmp_path: pathlib.Path) -> Iterator[RoleProcess]:
    master = start_master(tmp_path / "m", "--lease-ms", "1500", "--heartbeat-ms", "200", "--unlink-grace-ms", "500")
    yield master
    assert master.stop() == 0


@pytest.fixture
def master(proc: RoleProcess) -> Iterator[Master]:
    client = Master(proc.address)
    yield client
    client.close()


def expect_error(code: grpc.StatusCode, errno_name: str, fn: Callable[[Any], Any], request: Any) -> None:
    with pytest.raises(grpc.RpcError) as info:
        fn(request)
    err: Any = info.value
    assert err.code() == code, err.details()
    assert dict(err.trailing_metadata() or ()).get("curvine-errno") == errno_name


def create(m: Master, parent: int, name: str, kind: int = cpb.REGULAR, **kw: Any) -> cpb.Attr:
    return m.Create(pb.CreateRequest(parent=parent, name=name, type=kind, mode=kw.pop("mode", 0o644),
                                     exclusive=kw.pop("exclusive", True), **kw)).attr


# ---------------------------------------------------------------------------------------------- contract


def test_ready_line_and_address_file_agree(proc: RoleProcess, tmp_path: pathlib.Path) -> None:
    assert proc.ready.startswith("master=127.0.0.1:")
    assert (tmp_path / "m" / "master.addr").read_text().strip() == proc.address


def test_sigterm_exits_cleanly(tmp_path: pathlib.Path) -> None:
    master = start_master(tmp_path / "m")
    master.process.send_signal(signal.SIGTERM)
    assert master.process.wait(15) == 0
    master = start_master(tmp_path / "m")
    master.process.send_signal(signal.SIGINT)
    assert master.process.wait(15) == 0


def test_refuses_an_open_non_loopback_address(tmp_path: pathlib.Path) -> None:
    result = subprocess.run(curvine_command("master", "--data-dir", str(tmp_path / "m"), "--host", "0.0.0.0",
                                            "--port", "0"), check=False, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "--token" in result.stderr and result.stdout == ""


def test_one_master_per_data_dir(proc: RoleProcess, tmp_path: pathlib.Path) -> None:
    result = subprocess.run(curvine_command("master", "--data-dir", str(tmp_path / "m"), "--port", "0"),
                            check=False, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "another master" in result.stderr


# ---------------------------------------------------------------------------------------------- namespace over gRPC


def test_namespace_calls_and_error_codes(master: Master) -> None:
    m = master
    d = create(m, ROOT, "d", cpb.DIRECTORY, mode=0o755)
    f = create(m, d.ino, "f", caller=pb.Caller(uid=1000, gid=100))
    assert (f.uid, f.gid, f.nlink, f.type) == (1000, 100, 1, cpb.REGULAR)
    assert m.Lookup(pb.LookupRequest(parent=d.ino, name="f")).attr == f
    assert m.GetAttr(pb.InodeRequest(ino=f.ino)).attr == f
    assert m.ResolvePath(pb.PathRequest(path="/d/f", follow_symlinks=True)).attr.ino == f.ino
    expect_error(grpc.StatusCode.NOT_FOUND, "ENOENT", m.Lookup, pb.LookupRequest(parent=d.ino, name="nope"))
    expect_error(grpc.StatusCode.NOT_FOUND, "ENOENT", m.GetAttr, pb.InodeRequest(ino=99999))
    expect_error(grpc.StatusCode.ALREADY_EXISTS, "EEXIST", m.Create,
                 pb.CreateRequest(parent=d.ino, name="f", type=cpb.REGULAR, exclusive=True))
    expect_error(grpc.StatusCode.INVALID_ARGUMENT, "EINVAL", m.Create,
                 pb.CreateRequest(parent=d.ino, name="a/b", type=cpb.REGULAR))
    expect_error(grpc.StatusCode.INVALID_ARGUMENT, "EINVAL", m.Create,
                 pb.CreateRequest(parent=d.ino, name="x", type=99))
    expect_error(grpc.StatusCode.FAILED_PRECONDITION, "ENOTDIR", m.Lookup, pb.LookupRequest(parent=f.ino, name="x"))
    expect_error(grpc.StatusCode.FAILED_PRECONDITION, "ENOTEMPTY", m.Unlink,
                 pb.UnlinkRequest(parent=ROOT, name="d", directory=True))
    expect_error(grpc.StatusCode.FAILED_PRECONDITION, "EISDIR", m.Unlink, pb.UnlinkRequest(parent=ROOT, name="d"))
    expect_error(grpc.StatusCode.PERMISSION_DENIED, "EPERM", m.Link,
                 pb.LinkRequest(ino=d.ino, new_parent=ROOT, new_name="dl"))

    changed = m.SetAttr(pb.SetAttrRequest(ino=f.ino, mode=0o600, size=10**15, mtime_ns=123)).attr
    assert (changed.mode, changed.size, changed.mtime_ns) == (0o600, 10**15, 123)
    untouched = m.SetAttr(pb.SetAttrRequest(ino=f.ino, atime_now=True)).attr
    assert untouched.mode == 0o600 and untouched.size == 10**15     # unset optionals stay

    linked = m.Link(pb.LinkRequest(ino=f.ino, new_parent=ROOT, new_name="hard")).attr
    assert linked.nlink == 2
    reply = m.Rename(pb.RenameRequest(parent=ROOT, name="hard", new_parent=d.ino, new_name="g"))
    assert (reply.replaced_ino, reply.replaced_nlink) == (0, 0)
    expect_error(grpc.StatusCode.ALREADY_EXISTS, "EEXIST", m.Rename,
                 pb.RenameRequest(parent=d.ino, name="g", new_parent=d.ino, new_name="f", flags=1))
    expect_error(grpc.StatusCode.INVALID_ARGUMENT, "EINVAL", m.Rename,
                 pb.RenameRequest(parent=ROOT, name="d", new_parent=d.ino, new_name="loop"))
    other = create(m, d.ino, "other")
    reply = m.Rename(pb.RenameRequest(parent=d.ino, name="other", new_parent=d.ino, new_name="g"))
    assert reply.replaced_ino == f.ino and reply.replaced_nlink == 1
    assert m.Lookup(pb.LookupRequest(parent=d.ino, name="g")).attr.ino == other.ino

    listing = m.ReadDir(pb.ReadDirRequest(ino=d.ino, limit=1))
    assert [e.name for e in listing.entries] == ["f"] and listing.more
    rest = m.ReadDir(pb.ReadDirRequest(ino=d.ino, after_name="f"))
    assert [e.name for e in rest.entries] == ["g"] and not rest.more
    assert rest.entries[0].attr.ino == other.ino

    link = create(m, ROOT, "sym", cpb.SYMLINK, symlink_target="/d/f")
    assert m.ReadLink(pb.InodeRequest(ino=link.ino)).target == "/d/f"
    assert m.ResolvePath(pb.PathRequest(path="/sym", follow_symlinks=True)).attr.ino == f.ino
    assert m.ResolvePath(pb.PathRequest(path="/sym")).attr.ino == link.ino
    create(m, ROOT, "loop", cpb.SYMLINK, symlink_target="/loop")
    expect_error(grpc.StatusCode.FAILED_PRECONDITION, "ELOOP", m.ResolvePath,
                 pb.PathRequest(path="/loop", follow_symlinks=True))

    m.SetXattr(pb.XattrRequest(ino=f.ino, name="user.k", value=b"\x00v", flags=1))
    assert m.GetXattr(pb.XattrRequest(ino=f.ino, name="user.k")).value == b"\x00v"
    assert list(m.ListXattr(pb.XattrRequest(ino=f.ino)).names) == ["user.k"]
    expect_error(grpc.StatusCode.ALREADY_EXISTS, "EEXIST", m.SetXattr,
                 pb.XattrRequest(ino=f.ino, name="user.k", value=b"", flags=1))
    expect_error(grpc.StatusCode.NOT_FOUND, "ENODATA", m.SetXattr,
                 pb.XattrRequest(ino=f.ino, name="user.none", value=b"", flags=2))
    expect_error(grpc.StatusCode.INVALID_ARGUMENT, "E2BIG", m.SetXattr,
                 pb.XattrRequest(ino=f.ino, name="user.big", value=b"x" * 65537))
    m.RemoveXattr(pb.XattrRequest(ino=f.ino, name="user.k"))
    expect_error(grpc.StatusCode.NOT_FOUND, "ENODATA", m.GetXattr, pb.XattrRequest(ino=f.ino, name="user.k"))

    unlinked = m.Unlink(pb.UnlinkRequest(parent=d.ino, name="f", keep_orphan=True))
    assert (unlinked.ino, unlinked.nlink) == (f.ino, 0)
    assert m.GetAttr(pb.InodeRequest(ino=f.ino)).attr.nlink == 0
    m.ReleaseOrphan(pb.InodeRequest(ino=f.ino))
    expect_error(grpc.StatusCode.NOT_FOUND, "ENOENT", m.GetAttr, pb.InodeRequest(ino=f.ino))

    stat = m.StatFs(pb.Empty())
    assert stat.files >= 4 and stat.block_size == 64 << 20 and stat.capacity == 0


def test_policy_blocks_and_a_worker_over_grpc(master: Master) -> None:
    m = master
    kv = create(m, ROOT, "kv", cpb.DIRECTORY, mode=0o755)
    assert m.GetPolicy(pb.PathRequest(path="/kv")).path == "/"
    reply = m.SetPolicy(pb.SetPolicyRequest(path="/kv", policy=cpb.Policy(storage_class=cpb.CACHE, ttl_ms=9000)))
    assert (reply.path, reply.policy.storage_class, reply.policy.ttl_ms) == ("/kv", cpb.CACHE, 9000)
    expect_error(grpc.StatusCode.INVALID_ARGUMENT, "EINVAL", m.SetPolicy,
                 pb.SetPolicyRequest(path="/kv", policy=cpb.Policy(placement="nowhere")))
    f = create(m, kv.ino, "chunk")
    expect_error(grpc.StatusCode.UNAVAILABLE, "EHOSTUNREACH", m.AddBlock, pb.AddBlockRequest(ino=f.ino, index=0))

    registered = m.RegisterWorker(pb.RegisterWorkerRequest(
        info=pb.WorkerInfo(worker_id="w1", host="127.0.0.1", port=7001, node="n1", capacity=1 << 40),
        block_ids=[555]))
    assert list(registered.delete_block_ids) == [555] and registered.epoch >= 1
    assert registered.lease_ms == 1500 and registered.heartbeat_interval_ms == 200
    grant = m.AddBlock(pb.AddBlockRequest(ino=f.ino, index=0, client_node="n1"))
    assert list(grant.worker_ids) == ["w1"] and grant.storage_class == cpb.CACHE and grant.ttl_ms == 9000
    assert grant.block_size == 64 << 20
    committed = m.CommitFile(pb.CommitFileRequest(ino=f.ino, size=100, set_mtime=True, blocks=[
        pb.BlockInfo(index=0, block_id=grant.block_id, length=100, checksum=(1 << 64) - 5, worker_ids=["w1"])]))
    assert committed.attr.size == 100
    blocks = m.GetBlocks(pb.InodeRequest(ino=f.ino))
    assert [(b.block_id, b.length, b.checksum, list(b.worker_ids)) for b in blocks.blocks] == [
        (grant.block_id, 100, (1 << 64) - 5, ["w1"])]
    assert blocks.policy.storage_class == cpb.CACHE
    expect_error(grpc.StatusCode.INVALID_ARGUMENT, "EINVAL", m.CommitFile,
                 pb.CommitFileRequest(ino=f.ino, size=1, blocks=[pb.BlockInfo(index=0, block_id=4242, length=1)]))

    m.Unlink(pb.UnlinkRequest(parent=kv.ino, name="chunk"))

    def heartbeat() -> pb.HeartbeatReply:
        return m.Heartbeat(pb.HeartbeatRequest(worker_id="w1", capacity=1 << 40, used=1 << 30,
                                               available=(1 << 40) - (1 << 30)))

    beat = heartbeat()
    assert not beat.reregister and list(beat.delete_block_ids) == [], "kept for the unlink grace"
    expect_error(grpc.StatusCode.NOT_FOUND, "ENOENT", m.GetBlocks, pb.InodeRequest(ino=f.ino))
    deadline = time.monotonic() + 5
    while not beat.delete_block_ids and time.monotonic() < deadline:
        time.sleep(0.1)
        beat = heartbeat()
    assert list(beat.delete_block_ids) == [grant.block_id], "deleted once the grace (0.5 s) is over"
    assert m.StatFs(pb.Empty()).capacity == 1 << 40
    report = m.Report(pb.Empty())
    assert [(w.worker_id, w.live, w.used) for w in report.workers] == [("w1", True, 1 << 30)]
    assert report.directories == 2 and report.files == 0 and report.blocks == 0
    view = m.GetMembership(pb.Empty())
    assert view.epoch == registered.epoch and [w.worker_id for w in view.workers] == ["w1"]
    assert view.cluster_id == registered.cluster_id
    assert m.Heartbeat(pb.HeartbeatRequest(worker_id="ghost")).reregister


def test_silent_worker_leaves_the_membership_within_the_lease(master: Master) -> None:
    m = master
    before = m.GetMembership(pb.Empty()).epoch
    m.RegisterWorker(pb.RegisterWorkerRequest(info=pb.WorkerInfo(worker_id="quiet", host="127.0.0.1", port=7002)))
    joined = m.GetMembership(pb.Empty())
    assert joined.epoch == before + 1 and [w.worker_id for w in joined.workers] == ["quiet"]
    for _ in range(5):                              # alive while it heartbeats (200 ms, lease 1500 ms)
        assert not m.Heartbeat(pb.HeartbeatRequest(worker_id="quiet")).reregister
        time.sleep(0.2)
    assert [w.worker_id for w in m.GetMembership(pb.Empty()).workers] == ["quiet"]
    # The deadline contract only (lease 1.5 s, generous bound): when exactly it leaves is
    # tested with a fake clock in tests/unit/test_master_maintenance.py.
    deadline = time.monotonic() + 15.0
    while any(w.live for w in m.GetMembership(pb.Empty()).workers):
        assert time.monotonic() < deadline, "a silent worker stayed live in the view"
        time.sleep(0.05)
    left = m.GetMembership(pb.Empty())
    assert left.epoch == before + 2
    # still listed, not live: clients keep its address for what it holds (it may only be late)
    assert [(w.worker_id, w.live, w.port) for w in left.workers] == [("quiet", False, 7002)]
    assert m.Heartbeat(pb.HeartbeatRequest(worker_id="quiet")).reregister
    lost = m.Report(pb.Empty()).workers
    assert [(w.worker_id, w.live) for w in lost] == [("quiet", False)]


# ---------------------------------------------------------------------------------------------- token


def test_token_is_required(tmp_path: pathlib.Path) -> None:
    proc = start_master(tmp_path / "m", "--token", "s3cret")
    try:
        for token in ("", "wrong"):
            client = Master(proc.address, token)
            with pytest.raises(grpc.RpcError) as info:
                client.GetAttr(pb.InodeRequest(ino=ROOT))
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED  # type: ignore[attr-defined]
            client.close()
        good = Master(proc.address, "s3cret")
        assert good.GetAttr(pb.InodeRequest(ino=ROOT)).attr.ino == ROOT
        good.close()
    finally:
        assert proc.stop() == 0


# ---------------------------------------------------------------------------------------------- durability


def test_acknowledged_creates_survive_kill_9(tmp_path: pathlib.Path) -> None:
    data = tmp_path / "m"
    proc = start_master(data)
    client = Master(proc.address)
    client.RegisterWorker(pb.RegisterWorkerRequest(info=pb.WorkerInfo(worker_id="w1", host="127.0.0.1", port=1)))
    epoch = client.GetMembership(pb.Empty()).epoch
    d = create(client, ROOT, "d", cpb.DIRECTORY, mode=0o755)
    n = 300
    with ThreadPoolExecutor(8) as pool:
        acked = list(pool.map(lambda i: create(client, d.ino, f"file{i:03d}").ino, range(n)))
    client.close()
    proc.kill()                                     # SIGKILL right after the last ack
    assert proc.process.returncode == -signal.SIGKILL

    again = start_master(data)
    try:
        client = Master(again.address)
        names: list[str] = []
        after = ""
        while True:
            page = client.ReadDir(pb.ReadDirRequest(ino=d.ino, after_name=after, limit=128))
            names += [e.name for e in page.entries]
            if not page.more:
                break
            after = names[-1]
        assert names == [f"file{i:03d}" for i in range(n)]
        assert sorted(client.Lookup(pb.LookupRequest(parent=d.ino, name=f"file{i:03d}")).attr.ino
                      for i in range(0, n, 37)) == sorted(acked[i] for i in range(0, n, 37))
        view = client.GetMembership(pb.Empty())
        assert view.epoch >= epoch                   # never backwards
        client.close()
    finally:
        assert again.stop() == 0


def test_flags_config_file_and_env(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "curvine.toml"
    config.write_text('[master]\nlease_ms = 4321\nheartbeat_interval_ms = 321\nroot_policy_class = "cache"\n')
    monkeypatch.setenv("CURVINE_HEARTBEAT_INTERVAL_MS", "123")         # env beats the file
    proc = start_master(tmp_path / "m", "--config", str(config), "--block-size", "8MiB")   # flag beats all
    try:
        client = Master(proc.address)
        reply = client.RegisterWorker(pb.RegisterWorkerRequest(info=pb.WorkerInfo(worker_id="w", port=1)))
        assert (reply.lease_ms, reply.heartbeat_interval_ms) == (4321, 123)
        assert client.StatFs(pb.Empty()).block_size == 8 << 20
        assert client.GetPolicy(pb.PathRequest(path="/")).policy.storage_class == cpb.CACHE
        client.close()
    finally:
        assert proc.stop() == 0
    bad = tmp_path / "bad.toml"
    bad.write_text("[master]\nno_such_key = 1\n")
    result = subprocess.run(curvine_command("master", "--data-dir", str(tmp_path / "m"), "--config", str(bad)),
                            check=False, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "no_such_key" in result.stderr


def test_module_entry_point_runs() -> None:
    result = subprocess.run([sys.executable, "-m", "curvine_py.cli.main", "master", "--help"],
                            check=False, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "--lease-ms" in result.stdout

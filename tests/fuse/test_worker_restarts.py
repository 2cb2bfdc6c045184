"""Writes through a mount across a kill -9 and restart of every worker (the smaller form of
tests/lmcache/test_curvine_fs.py::test_fs_survives_worker_restarts): files are written the way
LMCache's fs:// connector writes them (a temp name, one write, close, rename over the final
name), several at once.

What each write gets: after the restart (every worker registered again, the mount's pooled
connections to the dead processes still in its pool), success and the exact bytes on a read;
while the workers are down, success with the exact bytes or a clean errno (EIO, ETIMEDOUT), never
a file under its final name with other bytes in it.
"""
from __future__ import annotations

import contextlib
import errno
import os
import pathlib
import threading
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from curvine_py.core.domain import Policy, StorageClass
from tests.fuse.mounts import Mount
from tests.harness import Cluster, random_bytes
from tests.netns import netns_supported, network_namespaces

DEADLINE = 10.0
FAILURES = {errno.EIO, errno.ETIMEDOUT}
FILE_BYTES = 512 * 1024 + 123          # one block, not page-aligned (LMCache's chunk + metadata)
TOKEN = "restart-test-token"
AT_ONCE = 4                            # LMCache puts a request's chunks concurrently


@pytest.fixture(params=["loopback", "netns"])
def rig(tmp_path: pathlib.Path, request: pytest.FixtureRequest) -> Iterator[tuple[Cluster, Mount, pathlib.Path]]:
    """A cluster of two workers and a mount on another node (pooled TCP only, no short-circuit):
    on loopback, or as in tests/lmcache/test_curvine_fs.py (the mount in a network namespace,
    its traffic crossing a veth to the workers on the bridge address, with a token)."""
    with contextlib.ExitStack() as stack:
        host, token, prefix = "", "", []
        if request.param == "netns":
            usable, reason = netns_supported()
            if not usable:
                pytest.skip(reason)
            net = stack.enter_context(network_namespaces(1))
            host, token, prefix = net.root_address, TOKEN, ["nsenter", f"--net=/run/netns/{net[0].name}"]
        cluster = stack.enter_context(Cluster(tmp_path / "cluster", workers=2, host=host, token=token))
        client = cluster.client()
        client.fs.mkdir("/kv")
        client.fs.set_policy("/kv", Policy(storage_class=StorageClass.CACHE))
        mount = stack.enter_context(Mount(cluster.master_address, tmp_path / "mnt", deadline=DEADLINE,
                                          token=token, prefix=prefix, args=["--node", "elsewhere"]))
        yield cluster, mount, mount.path / "kv"


def put(directory: pathlib.Path, name: str, data: bytes) -> None:
    """As LMCache's fs:// connector: temp file, one write, close, atomic rename."""
    final, temp = directory / f"{name}.data", directory / f"{name}.tmp"
    with open(temp, "wb") as f:
        f.write(data)
    os.replace(temp, final)


def put_all(directory: pathlib.Path, prefix: str, count: int, seed: int) -> dict[str, BaseException | None]:
    """`count` puts, AT_ONCE at a time: name -> None (stored) or the error it raised."""
    def one(i: int) -> tuple[str, BaseException | None]:
        name = f"{prefix}{i}"
        try:
            put(directory, name, random_bytes(FILE_BYTES, seed + i))
        except OSError as exc:
            return name, exc
        return name, None
    with ThreadPoolExecutor(AT_ONCE) as pool:
        return dict(pool.map(one, range(count)))


def kill_and_restart_all(cluster: Cluster) -> None:
    for index in range(len(cluster.workers)):
        cluster.kill_worker(index)
    for index in range(len(cluster.workers)):
        cluster.restart_worker(index)
    cluster.wait_for_live_workers(len(cluster.workers))


def test_puts_right_after_every_worker_restarted(rig: tuple[Cluster, Mount, pathlib.Path]) -> None:
    cluster, mount, kv = rig
    # Round one fills the mount's connection pool with connections to both workers.
    first = put_all(kv, "a", 8, seed=100)
    assert all(error is None for error in first.values()), (first, mount.log[-4000:])
    kill_and_restart_all(cluster)
    second = put_all(kv, "b", 8, seed=200)
    failed = {name: repr(error) for name, error in second.items() if error is not None}
    assert not failed, (failed, "\n--- mount log ---\n" + mount.log[-8000:])
    for i in range(8):
        assert (kv / f"b{i}.data").read_bytes() == random_bytes(FILE_BYTES, 200 + i), f"b{i}"
        assert (kv / f"a{i}.data").read_bytes() == random_bytes(FILE_BYTES, 100 + i), f"a{i}"


def test_puts_across_the_restart_are_exact_or_fail_cleanly(rig: tuple[Cluster, Mount, pathlib.Path]) -> None:
    cluster, mount, kv = rig
    assert all(e is None for e in put_all(kv, "warm", 4, seed=300).values())
    outcomes: dict[str, int] = {}     # name -> 0 (stored) or errno
    stop = threading.Event()

    def churn(lane: int) -> None:
        i = 0
        while not stop.is_set():
            name = f"w{lane}-{i}"
            try:
                put(kv, name, random_bytes(FILE_BYTES, zlib.crc32(name.encode())))
                outcomes[name] = 0
            except OSError as exc:
                outcomes[name] = exc.errno or -1
            i += 1

    lanes = [threading.Thread(target=churn, args=(lane,)) for lane in range(2)]
    for lane in lanes:
        lane.start()
    try:
        kill_and_restart_all(cluster)
    finally:
        stop.set()
        for lane in lanes:
            lane.join()
    unclear = {name: code for name, code in outcomes.items() if code not in (0, *FAILURES)}
    assert not unclear, (unclear, mount.log[-4000:])
    for name, code in outcomes.items():
        final = kv / f"{name}.data"
        if code == 0:
            assert final.read_bytes() == random_bytes(FILE_BYTES, zlib.crc32(name.encode())), name
        else:
            assert not final.exists(), f"{name} failed with {errno.errorcode.get(code)} but was published"
    after = put_all(kv, "after", 8, seed=400)
    failed = {name: repr(error) for name, error in after.items() if error is not None}
    assert not failed, (failed, "\n--- mount log ---\n" + mount.log[-8000:])

"""The free-space reserve of every data dir (issue 11), on small tmpfs mounts: whatever the
configured capacity, a share of the file system stays free, measured from the file system itself;
below it cache data is evicted and writes get ENOSPC. The store with the evictor in-process, then
a real worker process with --free-space-ratio."""
from __future__ import annotations

import contextlib
import errno
import os
import pathlib
import subprocess
from collections.abc import Iterator

import pytest

from curvine_py.core.errors import NoSpace
from curvine_py.procs import curvine_command
from curvine_py.proto.curvine.v1.common_pb2 import CACHE, DURABLE
from curvine_py.worker.evictor import Evictor
from curvine_py.worker.store import Store
from tests.harness import Cluster, random_bytes, wait_until
from tests.unit.test_worker_server import WireClient

MiB = 1 << 20


@contextlib.contextmanager
def tmpfs(path: pathlib.Path, size: str) -> Iterator[pathlib.Path]:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def free_bytes(path: pathlib.Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill_outside(path: pathlib.Path, size: int) -> None:
    """Someone else writes to the same file system (outside the worker's accounting)."""
    with open(path / "someone-else.bin", "wb") as fh:
        fh.write(b"o" * size)


def test_durable_writes_stop_at_the_reserve_whatever_the_capacity(tmp_path: pathlib.Path) -> None:
    with tmpfs(tmp_path / "fs", "16m") as fs, Store([(str(fs / "d"), 1 << 30)], free_space_ratio=0.25) as store:
        capacity = store.usage().capacity
        assert capacity == 12 * MiB                      # 16 MiB less the 4 MiB reserve, not 1 GiB
        stored = 0
        with pytest.raises(NoSpace):
            while True:
                store.write_block(stored + 1, b"d" * MiB, storage_class=DURABLE)
                stored += 1
        assert 10 <= stored < 12 and free_bytes(fs) >= 4 * MiB
        assert store.usage().available < MiB
        assert all(store.contains_block(i + 1) for i in range(stored))


def test_below_the_reserve_cache_data_is_evicted_and_durable_writes_get_enospc(tmp_path: pathlib.Path) -> None:
    now = [1_000_000]
    with tmpfs(tmp_path / "fs", "16m") as fs, Store([(str(fs / "d"), 0)], free_space_ratio=0.25,
                                                    clock=lambda: now[0]) as store:
        evictor = Evictor(store, high=0.9, low=0.75)
        store.write_block(1, b"D" * MiB, storage_class=DURABLE)
        for i in range(7):
            now[0] += 1
            store.put_object(f"c{i}", random_bytes(MiB, seed=i))   # cache class (a KV object)
        assert evictor.run_once() == 0                       # 8 of 12 MiB: below the high watermark
        fill_outside(fs, 6 * MiB)                            # the file system now has ~2 MiB free
        assert free_bytes(fs) < 4 * MiB
        evicted = evictor.run_once()
        # The reserve is free again once the reaper's thread has unlinked the evicted files.
        wait_until(lambda: store.dirs[0].reaping == 0, 10.0, "the reaper's unlinks")
        assert evicted > 0 and free_bytes(fs) >= 4 * MiB
        assert store.exists(["c0"]) == 0 and store.exists(["c6"]) == 1      # least recently used first
        assert store.contains_block(1)                       # durable data is never evicted
        fill_outside(fs, 11 * MiB)                           # the reserve is short even with no cache left
        evictor.run_once()
        assert store.stats().objects == 0 and store.contains_block(1)    # all cache gone, durable kept
        with pytest.raises(NoSpace):
            store.write_block(2, b"x" * MiB, storage_class=DURABLE)
        with pytest.raises(NoSpace):
            store.put_object("late", b"y" * MiB)
        wait_until(lambda: store.dirs[0].reaping == 0, 10.0, "the reaper's unlinks")
        assert store.stats().blocks == 1 and os.listdir(fs / "d" / "tmp") == []


def test_a_worker_process_keeps_its_reserve(tmp_path: pathlib.Path) -> None:
    with tmpfs(tmp_path / "worker0", "8m") as fs, \
            Cluster(tmp_path, workers=1, capacity="1GiB", worker_args=["--free-space-ratio", "0.5"]) as cluster:
        host, port = cluster.workers[0].address.rsplit(":", 1)   # type: ignore[union-attr]
        with WireClient((host, int(port))) as c:
            assert c.put("d1", random_bytes(3 * MiB, seed=1), storage_class=DURABLE).errno == 0
            reply = c.put_with_trailer("d2", random_bytes(3 * MiB, seed=2), storage_class=DURABLE)
            assert reply.errno == errno.ENOSPC                 # 4 MiB of 8 stay free
            assert free_bytes(fs) >= 4 * MiB
            for i in range(3):                                 # cache data evicts older cache data
                assert c.put(f"c{i}", random_bytes(MiB // 2, seed=10 + i), storage_class=CACHE).errno == 0
            assert c.get("d1")[0].found and free_bytes(fs) >= 4 * MiB
        member = cluster.client().master.membership().workers[0]
        assert member.capacity == 4 * MiB


@pytest.mark.parametrize("ratio", ["1", "-0.1", "abc"])
def test_a_bad_free_space_ratio_is_refused(tmp_path: pathlib.Path, ratio: str) -> None:
    result = subprocess.run(curvine_command("worker", "--master", "127.0.0.1:1", "--data-dir", str(tmp_path),
                                            "--free-space-ratio", ratio), capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 2 and "free-space-ratio" in result.stderr

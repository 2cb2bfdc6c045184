"""A failed write never publishes a size that covers bytes that were not stored: a block write
that fails (full disk, worker killed mid-write) fails the handle, nothing of it is committed, the
file keeps what it had, and the CLI leaves neither a visible file nor a partial download."""
from __future__ import annotations

import errno
import pathlib
from collections.abc import Iterator

import pytest

from curvine_py.client import CurvineClient
from curvine_py.core.domain import Policy
from curvine_py.core.errors import CurvineError, NoSpace, NotFound
from tests.harness import Cluster, random_bytes, small_disk_cluster
from tests.integration.test_cli import cli

MiB = 1 << 20


@pytest.fixture
def small_disk(tmp_path: pathlib.Path) -> Iterator[Cluster]:
    with small_disk_cluster(tmp_path) as cluster:
        yield cluster


def test_failed_put_leaves_nothing_visible(small_disk: Cluster, tmp_path: pathlib.Path) -> None:
    local = tmp_path / "big.bin"
    local.write_bytes(random_bytes(12 * MiB, seed=1))
    result = cli("fs", "--master", small_disk.master_address, "put", str(local), "/durable/big.bin")
    assert result.returncode == 1
    assert b"No space" in result.stderr or b"ENOSPC" in result.stderr or b"space" in result.stderr
    client = small_disk.client()
    with pytest.raises(NotFound):
        client.fs.stat("/durable/big.bin")
    assert [e.path for e in client.fs.ls("/durable")] == []     # no temporary name left behind either


def test_failed_put_keeps_the_existing_file(small_disk: Cluster, tmp_path: pathlib.Path) -> None:
    client = small_disk.client()
    old = random_bytes(MiB, seed=2)
    with client.fs.open("/durable/f", "wb") as f:
        f.write(old)
    local = tmp_path / "big.bin"
    local.write_bytes(random_bytes(12 * MiB, seed=3))
    with pytest.raises(NoSpace):
        client.fs.put(str(local), "/durable/f")
    assert client.fs.stat("/durable/f").size == len(old)
    with client.fs.open("/durable/f") as f:
        assert f.read() == old


def test_failed_multi_block_write_publishes_nothing(small_disk: Cluster) -> None:
    """Through the library: the third 4 MiB block does not fit; close raises ENOSPC and says that
    nothing was published; the file keeps its committed (empty) content, never a 12 MiB file
    whose last block reads as zeros."""
    client = small_disk.client()
    f = client.fs.open("/durable/lib.bin", "wb")
    with pytest.raises(NoSpace) as raised:
        f.write(random_bytes(12 * MiB, seed=4))
        f.close()
    assert "nothing written through this handle" in str(raised.value)
    assert raised.value.errno == errno.ENOSPC
    with pytest.raises(NoSpace):            # sticky: later writes and the close say it again
        f.write(b"more")
    with pytest.raises(NoSpace):
        f.close()
    assert f.closed
    assert client.fs.stat("/durable/lib.bin").size == 0


def test_worker_killed_mid_write_publishes_nothing(tmp_path: pathlib.Path) -> None:
    with Cluster(tmp_path, workers=1) as cluster:
        client = cluster.client()
        client.fs.mkdir("/d")
        client.fs.set_policy("/d", Policy(block_size=MiB))
        with client.fs.open("/d/f", "wb") as f:
            f.write(random_bytes(2 * MiB, seed=5))     # committed: 2 MiB
        before = client.fs.open("/d/f").read()
        f = client.fs.open("/d/f", "r+b")
        f.write(random_bytes(2 * MiB, seed=6))         # two full blocks sent to the worker
        cluster.kill_worker(0)
        with pytest.raises(CurvineError):
            f.write(random_bytes(3 * MiB, seed=7))
            f.close()
        with pytest.raises(CurvineError):
            f.close()
        cluster.restart_worker(0)
        fresh = CurvineClient(cluster.master_address, node="reader")
        try:
            assert fresh.fs.stat("/d/f").size == 2 * MiB
            with fresh.fs.open("/d/f") as g:
                assert g.read() == before                # the old content, whole
        finally:
            fresh.close()


def test_failed_get_leaves_no_partial_file(tmp_path: pathlib.Path) -> None:
    with Cluster(tmp_path, workers=1) as cluster:
        client = cluster.client()
        client.fs.set_policy("/", Policy(block_size=MiB))
        with client.fs.open("/f", "wb") as f:
            f.write(random_bytes(3 * MiB, seed=8))
        out = tmp_path / "out" / "copy.bin"
        out.parent.mkdir()
        cluster.kill_worker(0)
        result = cli("fs", "--master", cluster.master_address, "get", "/f", str(out))
        assert result.returncode != 0
        assert list(out.parent.iterdir()) == []          # neither the file nor a temporary
        cluster.restart_worker(0)
        assert cli("fs", "--master", cluster.master_address, "get", "/f", str(out)).returncode == 0
        assert out.read_bytes() == random_bytes(3 * MiB, seed=8)
        assert oct(out.stat().st_mode & 0o777) != oct(0o600)   # not mkstemp's private mode

"""Issue 11 item 9: blocks never leak while a file stays open. A block rewritten before its commit
and the blocks of a handle that failed are given up at once (AbandonBlocks), so the workers hold
only what the namespace references, not every rewrite since the open."""
from __future__ import annotations

import pathlib

import pytest

from curvine_py.core.domain import Policy
from curvine_py.core.errors import NoSpace
from tests.harness import Cluster, random_bytes, wait_until
from tests.integration.test_failed_writes import small_disk  # noqa: F401 - the fixture

MiB = 1 << 20


def stored_blocks(cluster: Cluster) -> int:
    return sum(1 for p in (cluster.worker_dir(0) / "blocks").rglob("*") if p.is_file())


def test_rewrites_of_an_open_file_do_not_pile_up(tmp_path: pathlib.Path) -> None:
    with Cluster(tmp_path, workers=1) as cluster:
        client = cluster.client()
        client.fs.mkdir("/d")
        client.fs.set_policy("/d", Policy(block_size=MiB))
        with client.fs.open("/d/f", "wb") as f:
            for round_ in range(12):          # each full block is sent at once: a new block per round
                f.seek(0)
                f.write(random_bytes(2 * MiB, seed=round_))
        with client.fs.open("/d/f") as f:
            assert f.read() == random_bytes(2 * MiB, seed=11)
        # 2 blocks referenced; the 22 rewrites were given up and deleted on the worker
        wait_until(lambda: stored_blocks(cluster) == 2, 20, "the superseded blocks deleted on the worker")
        wait_until(lambda: client.master.membership().workers[0].blocks == 2, 20, "a heartbeat with 2 blocks")


def test_a_failed_handle_gives_up_what_it_wrote(small_disk: Cluster) -> None:  # noqa: F811
    client = small_disk.client()
    f = client.fs.open("/durable/f", "wb")
    with pytest.raises(NoSpace):
        f.write(random_bytes(12 * MiB, seed=3))   # the third 4 MiB block does not fit
        f.close()
    with pytest.raises(NoSpace):
        f.close()
    assert client.fs.stat("/durable/f").size == 0
    wait_until(lambda: stored_blocks(small_disk) == 0, 20, "the failed handle's blocks deleted")

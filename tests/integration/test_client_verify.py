"""The client verifies every KV read, over TCP and over the short-circuit fd path, with the chunk
digests it computes while the bytes arrive: bad stored bytes become a miss, never returned bytes."""
from __future__ import annotations

import mmap
import pathlib
from collections.abc import Iterator

import pytest

from curvine_py.core import layout
from tests.harness import Cluster, random_bytes

MiB = 1 << 20
SIZE = 3 * MiB + 12345        # several chunks and a partial last one


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[Cluster]:
    with Cluster(tmp_path, workers=1, node_names=["node-a"]) as c:
        c.wait_for_live_workers(1)
        yield c


def stored_path(cluster: Cluster, key: str) -> pathlib.Path:
    name = layout.object_file_name(key)
    return cluster.worker_dir(0) / "kv" / layout.shard_dir(name) / name


@pytest.mark.parametrize("node", ["elsewhere", "node-a"], ids=["tcp", "short-circuit"])
def test_good_bytes_arrive_whole(cluster: Cluster, node: str) -> None:
    client = cluster.client(node=node)
    worker = next(iter(client.membership.view().workers.values()))
    assert client.io.is_local(worker) == (node == "node-a")
    data = random_bytes(SIZE, seed=5)
    client.kv.put("whole", data)
    out = memoryview(mmap.mmap(-1, SIZE + MiB))
    assert client.kv.get_into("whole", out) == SIZE
    assert bytes(out[:SIZE]) == data
    assert client.kv.get("whole") == data


@pytest.mark.parametrize("node", ["elsewhere", "node-a"], ids=["tcp", "short-circuit"])
@pytest.mark.parametrize("where", [0, MiB + 7, SIZE - 1], ids=["first-chunk", "middle-chunk", "last-byte"])
def test_corrupt_stored_bytes_are_a_miss(cluster: Cluster, node: str, where: int) -> None:
    client = cluster.client(node=node)
    data = random_bytes(SIZE, seed=6)
    client.kv.put("bad", data)
    path = stored_path(cluster, "bad")
    raw = bytearray(path.read_bytes())
    offset = len(raw) - SIZE + where          # the payload follows the stored header
    raw[offset] ^= 0xFF
    path.write_bytes(bytes(raw))
    out = memoryview(mmap.mmap(-1, SIZE))
    assert client.kv.get_into("bad", out) is None
    assert client.kv.get("bad") is None       # the worker dropped its bad copy
    assert not path.exists()

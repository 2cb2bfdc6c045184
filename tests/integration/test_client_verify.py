"""The client verifies every KV read, over TCP and over the short-circuit fd path, with the chunk
digests it computes while the bytes arrive: bad stored bytes become a miss, never returned bytes."""
from __future__ import annotations

import mmap
import pathlib
from collections.abc import Iterator

import pytest

from curvine_py.client import dataconn, digests
from curvine_py.client.digests import GROUP, OFFLOAD_MIN
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


LARGE = OFFLOAD_MIN + 3 * MiB + 12345   # hashed on the helper thread as it arrives (client/digests.py)


@pytest.mark.parametrize("where", [None, GROUP + MiB + 7, LARGE - 1], ids=["intact", "second-group", "last-byte"])
def test_a_large_object_hashed_aside_is_verified_the_same(cluster: Cluster, where: int | None,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # The worker listens on loopback; its connections are taken for another host's so that the
    # helper hashes the payload (dataconn.ReplyStream: a loopback peer is hashed inline).
    monkeypatch.setattr(dataconn.blocking, "is_loopback_peer", lambda _sock: False)
    claimed: list[bool] = []
    claim = digests._HASHER.claim
    monkeypatch.setattr(digests._HASHER, "claim", lambda: claimed.append(claim()) or claimed[-1])
    client = cluster.client(node="elsewhere")    # TCP: the path whose digests the helper computes
    data = random_bytes(LARGE, seed=7)
    client.kv.put("large", data)
    if where is not None:
        path = stored_path(cluster, "large")
        raw = bytearray(path.read_bytes())
        raw[len(raw) - LARGE + where] ^= 0xFF
        path.write_bytes(bytes(raw))
    out = memoryview(mmap.mmap(-1, LARGE))
    if where is None:
        assert client.kv.get_into("large", out) == LARGE and bytes(out) == data
        assert claimed and all(claimed), claimed    # every large payload went through the helper
    else:
        assert client.kv.get_into("large", out) is None
        assert client.kv.get("large") is None


def _buffer_kinds() -> list[tuple[str, object]]:
    """Every kind of writable buffer a caller (LMCache among them) may hand to get_into."""
    import array

    import numpy
    kinds: list[tuple[str, object]] = [
        ("bytearray", bytearray(SIZE)),
        ("mmap", mmap.mmap(-1, SIZE)),
        ("memoryview", memoryview(bytearray(SIZE + 10))[5:SIZE + 5]),
        ("array", array.array("B", bytes(SIZE))),
        ("numpy-uint8", numpy.zeros(SIZE, dtype=numpy.uint8)),
        ("numpy-2d", numpy.zeros((SIZE // 5, 5), dtype=numpy.uint8)),
    ]
    try:
        import torch
    except ImportError:     # CI installs torch (the LMCache stack); a bare venv checks the rest
        return kinds
    kinds.append(("torch-uint8", torch.zeros(SIZE, dtype=torch.uint8)))
    kinds.append(("torch-bfloat16", torch.zeros(SIZE // 2 + 1, dtype=torch.bfloat16)))
    return kinds


@pytest.mark.parametrize("node", ["elsewhere", "node-a"], ids=["tcp", "short-circuit"])
@pytest.mark.parametrize("kind,buffer", _buffer_kinds(), ids=[k for k, _ in _buffer_kinds()])
def test_get_into_any_writable_buffer(cluster: Cluster, node: str, kind: str, buffer: object) -> None:
    """The bytes land in the caller's own memory, are verified there, and the good copy stays."""
    client = cluster.client(node=node)
    size = (SIZE // 5) * 5 if kind == "numpy-2d" else SIZE
    data = random_bytes(size, seed=7)
    client.kv.put("any-buffer", data)
    assert client.kv.get_into("any-buffer", buffer) == size
    if hasattr(buffer, "numpy"):                         # a torch tensor: read back its bytes
        raw = buffer.view(-1).view(__import__("torch").uint8).numpy().tobytes()  # type: ignore[attr-defined]
    else:
        raw = memoryview(buffer).cast("B").tobytes()     # type: ignore[arg-type]
    assert raw[:size] == data
    assert client.kv.get("any-buffer") == data           # not reported as corrupt, not dropped
    assert stored_path(cluster, "any-buffer").exists()


def test_get_into_refuses_read_only_buffers(cluster: Cluster) -> None:
    """A read-only buffer is the caller's mistake: InvalidArgument, and the stored copy is kept."""
    from curvine_py.core.errors import InvalidArgument
    client = cluster.client()
    client.kv.put("read-only", b"x" * 1000)
    with pytest.raises(InvalidArgument, match="read-only"):
        client.kv.get_into("read-only", bytes(1000))
    with pytest.raises(InvalidArgument, match="not a writable buffer"):
        client.kv.get_into("read-only", 12345)
    assert client.kv.get("read-only") == b"x" * 1000

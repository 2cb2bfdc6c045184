"""CurvineFile features the FUSE mount relies on: blocks a handle committed stay readable from
memory (and feed the next copy-on-write), reads and writes that need no worker can be done without
blocking (try_pread_into / try_pwrite), truncate derives the block map locally, refresh and
preloaded block maps, read-ahead, write-behind."""
from __future__ import annotations

import pytest

from curvine_py.client.files import CurvineFile
from curvine_py.core.domain import FileBlocks, FileType, NewNode, Policy
from curvine_py.core.errors import CurvineError
from tests.harness import Cluster, random_bytes

KiB = 1024
BLOCK = 64 * KiB


def _new_file(cluster: Cluster, name: str) -> tuple[CurvineFile, object]:
    client = cluster.client()
    client.fs.mkdir("/small", parents=True)
    client.fs.set_policy("/small", Policy(block_size=BLOCK))
    parent = client.fs.stat("/small").ino
    attr = client.master.create(NewNode(parent, name, FileType.REGULAR, 0o644))
    handle = CurvineFile(client.blocks, attr, node="test", writable=True, blocks=FileBlocks(attr, (), Policy()))
    return handle, client


def _fresh(client: object, handle: CurvineFile) -> bytes:
    other = CurvineFile(client.blocks, handle.attr, node="test", writable=False)  # type: ignore[attr-defined]
    return other.pread(0, other.size + 10)


def test_committed_blocks_are_served_from_memory_even_with_the_worker_gone(cluster1: Cluster) -> None:
    handle, _ = _new_file(cluster1, "kept")
    data = random_bytes(3 * BLOCK - 100, seed=3)
    assert handle.try_pwrite(0, data[:100]) == 100, "a new block needs no worker"
    handle.pwrite(0, data)
    handle.commit()
    assert not handle.dirty
    cluster1.kill_worker(0)
    out = memoryview(bytearray(len(data) + 50))
    assert handle.try_pread_into(0, out) == len(data)
    assert out[:len(data)] == data
    assert handle.try_pwrite(10, b"rewrite") == 7, "copy-on-write from the kept buffer"
    assert handle.pread(0, 20) == data[:10] + b"rewrite" + data[17:20]


def test_try_apis_decline_what_needs_a_worker(cluster1: Cluster) -> None:
    handle, client = _new_file(cluster1, "cold")
    data = random_bytes(2 * BLOCK, seed=4)
    handle.pwrite(0, data)
    handle.commit()
    cold = CurvineFile(client.blocks, handle.attr, node="test", writable=True)  # type: ignore[attr-defined]
    out = memoryview(bytearray(100))
    assert cold.try_pread_into(0, out) is None, "stored block, not in memory"
    assert cold.try_pwrite(5, b"x") is None, "copy-on-write would fetch the block"
    assert cold.try_pread_into(5 * BLOCK, out) == 0, "past the end"
    assert cold.try_pwrite(BLOCK - 1, b"xy") is None, "touches a stored block"
    assert cold.try_pwrite(4 * BLOCK, b"far") == 3, "a new block past the end: no worker"
    assert cold.try_pread_into(2 * BLOCK, out) == 100 and bytes(out) == bytes(100), "a hole"
    assert cold.try_pwrite(5 * BLOCK - 1, b"z") is None, "completes a block: it must be sent"


def test_truncate_keeps_the_handle_and_the_master_in_agreement(cluster1: Cluster) -> None:
    handle, client = _new_file(cluster1, "trunc")
    data = random_bytes(3 * BLOCK + 500, seed=5)
    handle.pwrite(0, data)
    handle.commit()
    handle.truncate(BLOCK + 10)
    assert handle.pread(0, 4 * BLOCK) == data[:BLOCK + 10]
    assert _fresh(client, handle) == data[:BLOCK + 10]
    handle.truncate(2 * BLOCK)
    expected = data[:BLOCK + 10] + bytes(BLOCK - 10)
    assert handle.pread(0, 4 * BLOCK) == expected, "growing exposes zeros, not the old bytes"
    handle.pwrite(BLOCK + 50, b"new")
    expected = expected[:BLOCK + 50] + b"new" + expected[BLOCK + 53:]
    assert handle.pread(0, 4 * BLOCK) == expected
    handle.commit()
    assert _fresh(client, handle) == expected


def test_refresh_sees_another_writers_commit_unless_dirty(cluster1: Cluster) -> None:
    handle, client = _new_file(cluster1, "shared")
    handle.pwrite(0, b"one")
    handle.commit()
    other = CurvineFile(client.blocks, handle.attr, node="test", writable=True)  # type: ignore[attr-defined]
    other.pwrite(0, b"TWO!")
    other.commit()
    assert handle.pread(0, 10) == b"one", "close-to-open: not before a refresh"
    assert handle.refresh() and handle.pread(0, 10) == b"TWO!"
    handle.pwrite(0, b"3")
    assert not handle.refresh(), "uncommitted writes are never thrown away"
    assert handle.pread(0, 10) == b"3WO!"


def test_read_ahead_returns_the_same_bytes(cluster1: Cluster) -> None:
    handle, client = _new_file(cluster1, "ahead")
    data = random_bytes(40 * BLOCK + 123, seed=6)
    handle.pwrite(0, data)
    handle.commit()
    handle.truncate(len(data) - 1000)          # a shortened last block (checksum unknown)
    data = data[:-1000]
    reader = CurvineFile(client.blocks, handle.attr, node="test", writable=False,  # type: ignore[attr-defined]
                         read_ahead=8 * BLOCK)
    out = memoryview(bytearray(3 * BLOCK))
    got = bytearray()
    while n := reader.pread_into(len(got), out):
        got += out[:n]
    assert bytes(got) == data
    assert reader.pread(5, 10) == data[5:15], "a jump back: read directly"
    assert reader.pread(len(data) - 5, 100) == data[-5:]
    reader.close()


def test_read_ahead_fetches_the_window_before_it_is_read(cluster1: Cluster) -> None:
    handle, client = _new_file(cluster1, "window")
    data = random_bytes(20 * BLOCK, seed=7)
    handle.pwrite(0, data)
    handle.close()
    reader = CurvineFile(client.blocks, handle.attr, node="test", writable=False,  # type: ignore[attr-defined]
                         read_ahead=8 * BLOCK)
    assert reader.pread(0, BLOCK) == data[:BLOCK]
    for future in list(reader._ahead.chunks.values()):   # type: ignore[union-attr]
        future.result(timeout=30)
    cluster1.kill_worker(0)
    assert reader.pread(BLOCK, 8 * BLOCK) == data[BLOCK:9 * BLOCK], "served from the read-ahead window"


def test_write_behind_sends_full_blocks_in_the_background(cluster1: Cluster) -> None:
    handle, client = _new_file(cluster1, "behind")
    handle = CurvineFile(client.blocks, handle.attr, node="test", writable=True,  # type: ignore[attr-defined]
                         blocks=FileBlocks(handle.attr, (), Policy()), write_behind=True)
    data = random_bytes(10 * BLOCK + 77, seed=8)
    for offset in range(0, len(data), 10_000):
        handle.pwrite(offset, data[offset:offset + 10_000])
    assert handle.pread(BLOCK - 5, 10) == data[BLOCK - 5:BLOCK + 5], "reads see blocks being sent"
    handle.pwrite(3, b"rewrite")                 # a block already sent: copy-on-write again
    expected = data[:3] + b"rewrite" + data[10:]
    handle.commit()
    assert not handle.dirty
    assert _fresh(client, handle) == expected


def test_write_behind_errors_surface_at_commit(cluster1: Cluster) -> None:
    handle, client = _new_file(cluster1, "behind-fails")
    handle = CurvineFile(client.blocks, handle.attr, node="test", writable=True,  # type: ignore[attr-defined]
                         blocks=FileBlocks(handle.attr, (), Policy()), write_behind=True)
    handle.pwrite(0, random_bytes(BLOCK, seed=9))      # full: sent in the background
    cluster1.kill_worker(0)
    handle.pwrite(BLOCK, b"tail")
    with pytest.raises(CurvineError):
        handle.commit()
    assert handle.dirty, "nothing was lost from memory: a later commit can retry"

"""Helpers for the tests that drive the mount's trio block reader directly (test_dataplane,
test_local_reads, test_chunk_runs): a one-file cluster state, the reader's verified read of a
byte range, and the stored file of a block (to corrupt it; bench.common.evict drops a file from the page cache)."""
from __future__ import annotations

import pathlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from curvine_py.client import CurvineClient
from curvine_py.client.buffers import aligned
from curvine_py.client.membership import View
from curvine_py.core import layout
from curvine_py.core.domain import BlockInfo
from curvine_py.core.rules import verifiable_range
from curvine_py.fuse.dataplane import TrioBlockReader
from tests.harness import Cluster, random_bytes


@dataclass(frozen=True)
class Written:
    """`/blob` as written by `client`: its bytes, its first block and the client's view."""

    client: CurvineClient
    data: bytes
    block: BlockInfo
    view: View


def write_blob(cluster: Cluster, size: int, seed: int) -> Written:
    client = cluster.client()
    data = random_bytes(size, seed=seed)
    with client.fs.open("/blob", "wb") as fh:
        fh.write(data)
    block = client.master.get_blocks(client.fs.stat("/blob").ino).blocks[0]
    return Written(client, data, block, client.blocks.membership.view())


def range_reader(reader: TrioBlockReader, view: View, block: BlockInfo) -> Callable[[int, int], Awaitable[bytes]]:
    """`read(offset, length)`: the bytes the reader returns for that range of `block`, fetched
    over the verifiable span around it, as the mount does."""

    async def read(offset: int, length: int) -> bytes:
        span = verifiable_range(block.length, block.checksum != 0, offset, length)
        out = aligned(max(span.length, 1))
        got = await reader.read(view, block, span.offset, span.length, out, span.minimum)
        return bytes(got[span.skip:span.skip + length])

    return read


def stored_file(cluster: Cluster, index: int, block_id: int) -> pathlib.Path:
    name = layout.block_file_name(block_id)
    return cluster.worker_dir(index) / "blocks" / layout.shard_dir(name) / name


def flip_byte(path: pathlib.Path, payload_length: int, payload_offset: int) -> None:
    """Flips one payload byte in place (the same inode: an open descriptor sees it too)."""
    header = path.stat().st_size - payload_length     # the payload is at the file's end
    with open(path, "r+b") as fh:
        fh.seek(header + payload_offset)
        byte = fh.read(1)
        fh.seek(header + payload_offset)
        fh.write(bytes([byte[0] ^ 0xFF]))


"""The mount's trio-socket block reader against a real worker: verified bytes, pooled
connections, and FastPathMiss (never a hang or a wrong byte) when something is off."""
from __future__ import annotations

from dataclasses import replace

import pytest
import trio

from curvine_py.client.buffers import aligned
from curvine_py.core.rules import verifiable_range
from curvine_py.fuse.dataplane import FastPathMiss, TrioBlockReader
from tests.harness import Cluster, random_bytes

MiB = 1 << 20


def test_trio_reader_reads_verified_chunks_and_misses_cleanly(cluster: Cluster) -> None:
    client = cluster.client()
    data = random_bytes(3 * MiB + 5000, seed=11)
    with client.fs.open("/blob", "wb") as fh:
        fh.write(data)
    blocks = client.master.get_blocks(client.fs.stat("/blob").ino).blocks
    block = blocks[0]
    view = client.blocks.membership.view()
    reader = TrioBlockReader(token=cluster.token, timeout_s=5.0, max_payload=256 * MiB)

    async def read(offset: int, length: int) -> bytes:
        span = verifiable_range(block.length, block.checksum != 0, offset, length)
        out = aligned(max(span.length, 1))
        got = await reader.read(view, block, span.offset, span.length, out, span.minimum)
        return bytes(got[span.skip:span.skip + length])

    async def scenario() -> None:
        assert await read(0, MiB) == data[:MiB]
        assert await read(MiB + 7, 100) == data[MiB + 7:MiB + 107], "a piece inside a chunk"
        assert await read(3 * MiB, 5000) == data[3 * MiB:], "the short last chunk"
        assert reader.hits == 3
        bogus = replace(block, block_id=block.block_id + 999, length=MiB, checksum=0)
        with pytest.raises(FastPathMiss):
            await reader.read(view, bogus, 0, MiB, aligned(MiB), MiB)
        cluster.kill_worker(0)
        with trio.fail_after(10):
            with pytest.raises(FastPathMiss):
                await reader.read(view, block, 0, MiB, aligned(MiB), MiB)

    trio.run(scenario)
    reader.close()

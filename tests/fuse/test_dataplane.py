"""The mount's trio-socket block reader against a real worker: verified bytes, pooled
connections, and FastPathMiss (never a hang or a wrong byte) when something is off."""
from __future__ import annotations

from dataclasses import replace

import pytest
import trio

from curvine_py.client.buffers import aligned
from curvine_py.fuse.dataplane import FastPathMiss, TrioBlockReader
from tests.fuse.blockreads import range_reader, write_blob
from tests.harness import Cluster

MiB = 1 << 20


def test_trio_reader_reads_verified_chunks_and_misses_cleanly(cluster: Cluster) -> None:
    blob = write_blob(cluster, 3 * MiB + 5000, seed=11)
    data, block, view = blob.data, blob.block, blob.view
    reader = TrioBlockReader(token=cluster.token, timeout_s=5.0, max_payload=256 * MiB)
    read = range_reader(reader, view, block)

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

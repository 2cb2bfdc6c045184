"""The background scrubber of a real worker process (--scrub-rate): a flipped bit in a block file
is found without any read, the copy dropped (a read then misses it, never returns it) and the
block reported bad to the master; the SCRUB op answers for `fsck --scrub`."""
from __future__ import annotations

import errno
import os
import pathlib

from curvine_py.core import frames
from curvine_py.proto.curvine.v1.data_pb2 import DataHeader
from tests.harness import Cluster, wait_until
from tests.unit.test_worker_server import WireClient

MiB = 1 << 20
Op = frames.Op


def test_a_flipped_bit_is_found_by_the_background_scrubber(tmp_path: pathlib.Path) -> None:
    with Cluster(tmp_path, workers=1) as cluster:
        worker = cluster.workers[0]
        assert worker is not None
        host, port = worker.address.rsplit(":", 1)
        fs = cluster.client().fs
        for path in ("/good", "/bad"):                             # one block each, known to the master
            with fs.open(path, "wb") as fh:
                fh.write(os.urandom(2 * MiB))
        blocks = sorted((cluster.worker_dir(0) / "blocks").glob("*/*"))
        assert len(blocks) == 2
        cluster.workers[0].stop()                                  # type: ignore[union-attr]
        bad = blocks[1]
        with open(bad, "r+b") as fh:                               # one bit, in the second chunk
            fh.seek(-MiB // 2, os.SEEK_END)
            byte = fh.read(1)[0]
            fh.seek(-MiB // 2, os.SEEK_END)
            fh.write(bytes([byte ^ 0x01]))
        bad_id = int(bad.name, 16)
        worker = cluster.start_worker(0, int(port), extra=["--scrub-rate", "64MiB"])
        wait_until(lambda: any("scrub pass: 2 files" in line for line in worker.tail), 30, "a scrub pass")
        assert any(f"blocks/{bad.name} failed verification" in line for line in worker.tail)
        assert any("1 corrupt copies dropped" in line for line in worker.tail)
        assert not bad.exists()
        with WireClient((host, int(port))) as c:
            reply, _ = c.exchange(Op.READ_BLOCK, DataHeader(block_id=bad_id))
            assert reply.errno == errno.ENOENT                      # dropped before anyone read it
            good = c.call(Op.SCRUB, DataHeader(block_id=int(blocks[0].name, 16)))
            assert good.found and good.length == 2 * MiB
            assert c.call(Op.SCRUB, DataHeader(block_id=bad_id)).found is False

"""FUSE middle tier: attribute replies that race a commit of the same open file.

Found by the randomized test (test_random_ops.py): a GETATTR whose master call was answered before
this mount's own commit landed, but whose reply reached the attribute cache after it, cached the
file's old size. Once the file was clean the overlay no longer masked it, the kernel took the old
size and the file looked truncated (reads came back short, then EIO on msync). Here the race is
made deterministic: the master's answer is taken first and handed back only after the commit.
"""
from __future__ import annotations

import os
import stat
from collections.abc import Iterator

import pytest
import trio

from curvine_py.core.domain import Attr
from curvine_py.fuse.operations import Operations
from tests.fuse.middle import ROOT, ROOT_CTX, Rig, fsck
from tests.harness import Cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("attr-races"), workers=1) as c:
        yield c
        assert fsck(c) == []


def test_a_getattr_answered_before_a_commit_never_shows_the_old_size_after_it(cluster: Cluster) -> None:
    rig = Rig(cluster)

    async def scenario(ops: Operations) -> None:
        info, entry = await ops.create(ROOT, b"grows", stat.S_IFREG | 0o644, os.O_RDWR | os.O_CREAT,
                                       ROOT_CTX)  # type: ignore[arg-type]
        ino = int(entry.st_ino)
        assert await ops.write(info.fh, 0, b"a" * 100) == 100
        await ops.flush(info.fh)                       # committed: 100 bytes
        assert await ops.write(info.fh, 100, b"b" * 100) == 100   # dirty: 200 bytes
        assert rig.fs is not None
        ctx = rig.fs.ctx
        original = ctx.master_getattr
        answered, committed = trio.Event(), trio.Event()

        async def late_getattr(asked: int) -> Attr:
            attr = await original(asked)     # the master still says 100 bytes
            answered.set()
            await committed.wait()           # ... and the reply is noted after the commit
            return attr

        ctx.master_getattr = late_getattr    # type: ignore[method-assign]
        ctx.attrs.drop(ino)
        seen: list[int] = []

        async def stat_it() -> None:
            seen.append((await ops.getattr(ino, ROOT_CTX)).st_size)  # type: ignore[arg-type]

        async with trio.open_nursery() as nursery:
            nursery.start_soon(stat_it)
            await answered.wait()
            await ops.flush(info.fh)                   # committed: 200 bytes
            committed.set()
        ctx.master_getattr = original        # type: ignore[method-assign]
        assert seen == [200]                 # dirty while it was asked: the local size
        assert (await ops.getattr(ino, ROOT_CTX)).st_size == 200  # type: ignore[arg-type]
        await ops.release(info.fh)
        assert (await ops.getattr(ino, ROOT_CTX)).st_size == 200  # type: ignore[arg-type]

    rig.run(scenario)

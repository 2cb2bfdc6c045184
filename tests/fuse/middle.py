"""The FUSE middle tier (s3ql's pattern): `Operations` called directly from trio with a fake
request context, over a real master and worker (tests/harness.py Cluster), no kernel mount. Every
scenario ends with the master's consistency check (its fsck of the namespace) finding nothing.

    rig = Rig(cluster)
    async def scenario() -> None:
        entry = await rig.mkdir("d")
        fh, entry = await rig.create("f", parent=entry.st_ino)
    rig.run(scenario)        # runs it, then asserts rig.fsck() == []

What is fake is only what the kernel would supply: the request context (uid, gid, pid, umask),
SetattrFields, and the readdir reply buffer (`pyfuse3.readdir_reply` collects into a list).
"""
from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pyfuse3
import pytest
import trio

from curvine_py.client import CurvineClient
from curvine_py.fuse.attrs import Timeouts
from curvine_py.fuse.dataplane import TrioBlockReader
from curvine_py.fuse.filesystem import Filesystem
from curvine_py.fuse.offload import Offload
from curvine_py.fuse.operations import Operations
from curvine_py.master.namespace import Namespace
from curvine_py.procs import curvine_command
from tests.harness import Cluster

ROOT = pyfuse3.ROOT_INODE


@dataclass(frozen=True, slots=True)
class FakeContext:
    """What pyfuse3.RequestContext carries (its attributes cannot be set from Python)."""
    uid: int = 0
    gid: int = 0
    pid: int = os.getpid()
    umask: int = 0o022


@dataclass(frozen=True, slots=True)
class Fields:
    """A pyfuse3.SetattrFields as the kernel would fill it."""
    update_mode: bool = False
    update_uid: bool = False
    update_gid: bool = False
    update_size: bool = False
    update_atime: bool = False
    update_mtime: bool = False
    update_ctime: bool = False


ROOT_CTX = FakeContext()


def fsck(cluster: Cluster) -> list[str]:
    """The master's consistency check, on a read-only connection to its live database."""
    store = Namespace(str(cluster.root / "master" / "meta.db"), read_only=True)
    try:
        return store.check()
    finally:
        store.close()


def cluster_fsck(cluster: Cluster) -> subprocess.CompletedProcess[str]:
    """`curvine-py fsck` (metadata against the workers' inventories, replica counts): exit 0 only
    when clean. Heavier than `fsck` (the workers re-send their inventories): once per cluster."""
    return subprocess.run(curvine_command("fsck", "--master", cluster.master_address,
                                          *(["--token", cluster.token] if cluster.token else [])),
                          capture_output=True, text=True, timeout=120, check=False)


class Rig:
    def __init__(self, cluster: Cluster, *, client: CurvineClient | None = None, attr_ttl: float = 1.0,
                 deadline_s: float = 10.0, trio_reads: bool = False) -> None:
        self.cluster = cluster
        self.client = client or cluster.client()
        self.trio_reads = trio_reads     # the mount's fast read path (fuse/dataplane.py), as in production
        self.deadline_s = deadline_s
        self.attr_ttl = attr_ttl
        self.fs: Filesystem | None = None
        self.ops: Operations | None = None

    def _build(self) -> Operations:
        """Built inside trio (the offload's limiters belong to the run)."""
        root = int(self.client.master.resolve("/").ino)
        config = self.client.config
        reader = TrioBlockReader(token=config.token, timeout_s=config.data_timeout_s, max_payload=config.max_payload,
                                 is_local=self.client.io.is_local) if self.trio_reads else None
        self.fs = Filesystem(self.client, Offload(deadline_s=self.deadline_s), root=root, node=self.client.node,
                             attr_ttl=self.attr_ttl, names_ttl=self.attr_ttl, reader=reader)
        self.ops = Operations(self.fs, Timeouts(self.attr_ttl, self.attr_ttl, 0.0))
        return self.ops

    def run(self, scenario: Callable[[Operations], Awaitable[None]]) -> None:
        async def main() -> None:
            ops = self._build()
            with trio.fail_after(120):
                await scenario(ops)
            assert self.fs is not None
            await self.fs.files.commit_all()
            await self.fs.atime.flush()
        trio.run(main)
        assert fsck(self.cluster) == []


@contextmanager
def fuse_error(code: int) -> Iterator[None]:
    """The handler must answer FUSEError(code), as the kernel would see it."""
    with pytest.raises(pyfuse3.FUSEError) as caught:
        yield
    assert caught.value.errno == code, f"{errno.errorcode.get(caught.value.errno)} instead of {errno.errorcode[code]}"


class ReaddirBuffer:
    """Stands in for the kernel's readdir buffer: `room` entries fit per READDIR, then replies
    say "full" and the kernel asks again from the last offset it got."""

    def __init__(self, room: int = 10_000) -> None:
        self.room = room
        self.got: list[tuple[bytes, int]] = []

    def reply(self, token: Any, name: bytes, attr: pyfuse3.EntryAttributes, next_id: int) -> bool:
        if len(self.got) >= self.room:
            return False
        self.got.append((name, next_id))
        return True

    async def list(self, ops: Operations, ino: int) -> list[str]:
        """All names of a directory as the kernel reads them: opendir, readdir until empty, releasedir."""
        fh = await ops.opendir(ino, ROOT_CTX)  # type: ignore[arg-type]
        names: list[str] = []
        start = 0
        try:
            while True:
                self.got.clear()
                await ops.readdir(fh, start, None)  # type: ignore[arg-type]
                if not self.got:
                    return names
                names += [n.decode() for n, _ in self.got]
                start = self.got[-1][1]
        finally:
            await ops.releasedir(fh)


def patch_readdir(monkeypatch: pytest.MonkeyPatch, room: int = 10_000) -> ReaddirBuffer:
    buffer = ReaddirBuffer(room)
    monkeypatch.setattr(pyfuse3, "readdir_reply", buffer.reply)
    return buffer

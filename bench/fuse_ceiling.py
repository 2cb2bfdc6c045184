"""The ceiling of a cold read through pyfuse3 on this machine: a file system of one file whose
bytes are already in memory, so a read costs only what every pyfuse3 file system pays (the kernel's
FUSE request, the trio task, the reply that libfuse 3.14 writes to /dev/fuse and the kernel copies
into fresh page-cache pages, the reader's copy out of them), no network, no verification.

    python -m bench.fuse_ceiling MOUNTPOINT SIZE [COUNT]   # files data0..data{COUNT-1} of SIZE bytes;
                                                           # prints "ready" once mounted; SIGTERM ends it

Used by bench/fuse.py (the mount's cold read beside this one) and by the notes on fs:// cold reads
(docs/benchmarks.md). Same kernel knobs as the curvine mount (fuse/mountpoint.tune: read-ahead,
max_background); replies are views of one pre-touched buffer (no copy in Python).
"""
from __future__ import annotations

import contextlib
import errno
import os
import pathlib
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pyfuse3
import trio

from curvine_py.client.buffers import aligned
from curvine_py.fuse import mountpoint

FIRST_INO = pyfuse3.ROOT_INODE + 1


class Ceiling(pyfuse3.Operations):
    def __init__(self, size: int, count: int) -> None:
        super().__init__()
        self.size, self.count = size, count
        self.data = aligned(max(size * count, 1))
        for start in range(0, size * count, 4096):      # touched (and not zero pages): a real copy
            self.data[start] = (start >> 12) & 0xFF

    def _attr(self, ino: int) -> pyfuse3.EntryAttributes:
        entry = pyfuse3.EntryAttributes()
        entry.st_ino = ino
        entry.st_mode = (stat.S_IFDIR | 0o755) if ino == pyfuse3.ROOT_INODE else (stat.S_IFREG | 0o644)
        entry.st_size = 0 if ino == pyfuse3.ROOT_INODE else self.size
        entry.st_nlink = 1
        entry.st_blksize = 1 << 20
        entry.attr_timeout = entry.entry_timeout = 3600
        return entry

    async def getattr(self, inode: int, ctx: Any = None) -> pyfuse3.EntryAttributes:
        if inode != pyfuse3.ROOT_INODE and not 0 <= inode - FIRST_INO < self.count:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self._attr(inode)

    async def lookup(self, parent_inode: int, name: bytes, ctx: Any = None) -> pyfuse3.EntryAttributes:
        index = name[4:].decode() if name.startswith(b"data") else ""
        if parent_inode != pyfuse3.ROOT_INODE or not index.isdigit() or int(index) >= self.count:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self._attr(FIRST_INO + int(index))

    async def open(self, inode: int, flags: int, ctx: Any) -> pyfuse3.FileInfo:
        if inode == pyfuse3.ROOT_INODE:
            raise pyfuse3.FUSEError(errno.EISDIR)
        return pyfuse3.FileInfo(fh=inode, keep_cache=False)

    async def read(self, fh: int, off: int, size: int) -> memoryview:
        base = (fh - FIRST_INO) * self.size
        return self.data[base + off:base + min(off + size, self.size)]


async def _serve(where: str) -> None:
    async with trio.open_nursery() as nursery:
        async def stop_on_signal() -> None:
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    pyfuse3.terminate()
                    return

        async def announce() -> None:
            await trio.to_thread.run_sync(os.stat, where)
            await trio.to_thread.run_sync(lambda: mountpoint.tune(where, read_ahead_kb=16384, max_background=64))
            print("ready", flush=True)

        nursery.start_soon(stop_on_signal)
        nursery.start_soon(announce)
        await pyfuse3.main(min_tasks=2, max_tasks=64)
        nursery.cancel_scope.cancel()


@contextlib.contextmanager
def serving(where: pathlib.Path, size: int, count: int = 1) -> Iterator[pathlib.Path]:
    """This file system mounted at `where` (files data0.. of `size` bytes) for the block's duration."""
    where.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen([sys.executable, "-m", "bench.fuse_ceiling", str(where), str(size), str(count)],
                               stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        if process.stdout.readline().strip() != "ready":
            raise RuntimeError("the ceiling file system did not mount")
        yield where
    finally:
        process.terminate()
        if process.wait(timeout=30) != 0 and mountpoint.is_mounted(str(where)):
            subprocess.run(["fusermount3", "-u", "-z", str(where)], check=False, capture_output=True)


def main(argv: list[str]) -> int:
    where, size, count = argv[0], int(argv[1]), int(argv[2]) if len(argv) > 2 else 1
    sys.setswitchinterval(0.0005)      # as the curvine mount (fuse/main.py)
    ops = Ceiling(size, count)
    pyfuse3.init(ops, where, {"fsname=ceiling", "subtype=ceiling", "default_permissions"})
    try:
        trio.run(_serve, where)
    finally:
        pyfuse3.close(unmount=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

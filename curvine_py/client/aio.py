"""asyncio API over the blocking client.

Each call runs in a bounded thread pool: the blocking data path spends its time in syscalls
(`recv_into`, `sendfile`, `preadv`) that release the GIL, so threads give real overlap without a
second implementation of the protocol. Pooled connections let concurrent calls proceed in parallel.
"""
from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Self, TypeVar

from curvine_py.client import CurvineClient
from curvine_py.client.types import FileStatus
from curvine_py.config import ClientConfig

T = TypeVar("T")


class AsyncCurvineClient:
    def __init__(self, master: str | None = None, *, config: ClientConfig | None = None,
                 max_concurrency: int = 8, **overrides: object) -> None:
        self.sync = CurvineClient(master, config=config, **overrides)
        self._pool = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="curvine-aio")

    async def _run(self, func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(func, *args, **kwargs))

    # KV
    async def put(self, key: str, data: bytes | bytearray | memoryview, **kwargs: Any) -> None:
        await self._run(self.sync.kv.put, key, data, **kwargs)

    async def get(self, key: str) -> bytes | None:
        return await self._run(self.sync.kv.get, key)

    async def get_into(self, key: str, out: Any) -> int | None:
        return await self._run(self.sync.kv.get_into, key, out)

    async def get_with_meta(self, key: str, out: Any = None) -> tuple[memoryview, bytes] | None:
        return await self._run(self.sync.kv.get_with_meta, key, out)

    async def exists(self, key: str) -> bool:
        return await self._run(self.sync.kv.exists, key)

    async def exists_prefix(self, keys: Sequence[str], pin: bool = True) -> int:
        return await self._run(self.sync.kv.exists_prefix, keys, pin=pin)

    async def delete(self, key: str) -> bool:
        return await self._run(self.sync.kv.delete, key)

    # files
    async def stat(self, path: str) -> FileStatus:
        return await self._run(self.sync.fs.stat, path)

    async def ls(self, path: str = "/") -> list[FileStatus]:
        return await self._run(self.sync.fs.ls, path)

    async def mkdir(self, path: str, parents: bool = False) -> FileStatus:
        return await self._run(self.sync.fs.mkdir, path, parents=parents)

    async def rm(self, path: str, recursive: bool = False) -> None:
        await self._run(self.sync.fs.rm, path, recursive=recursive)

    async def rename(self, src: str, dst: str) -> None:
        await self._run(self.sync.fs.rename, src, dst)

    async def write_file(self, path: str, data: bytes) -> None:
        def write() -> None:
            with self.sync.fs.open(path, "wb") as handle:
                handle.write(data)
        await self._run(write)

    async def read_file(self, path: str) -> bytes:
        def read() -> bytes:
            with self.sync.fs.open(path, "rb") as handle:
                return handle.pread(0, handle.size)
        return await self._run(read)

    async def close(self) -> None:
        self._pool.shutdown(wait=True)
        self.sync.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

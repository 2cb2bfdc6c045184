"""LMCache in-process mode: a `RemoteConnector` for `remote_storage_plugins`.

    remote_storage_plugins: ["curvine"]
    extra_config:
      remote_storage_plugin.curvine.module_path: curvine_py.lmcache.connector
      remote_storage_plugin.curvine.class_name: CurvineConnectorAdapter
      remote_storage_plugin.curvine.master: "10.0.0.1:8995"

Keys go straight to their owner worker (client-side rendezvous hashing), the bytes land in the
MemoryObj LMCache allocated (`recv_into`, no copy), LMCache's RemoteMetadata (fmt/dtype/shape) is
stored with each object so any reader can allocate the right shape. A miss or any failure is
`None`/False to LMCache, never an exception: the cache must not break serving. Connections
reconnect by themselves after a worker restart (LMCache never rebuilds a broken connector).
Lookups count as hits and misses of way `plugin` in this process (plugin_metrics.py); a get for
which LMCache has no L1 memory is not a lookup.
"""
from __future__ import annotations

import asyncio
import builtins
import functools
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from lmcache.utils import CacheEngineKey
from lmcache.v1.memory_management import MemoryObj
from lmcache.v1.storage_backend.connector import ConnectorAdapter, ConnectorContext
from lmcache.v1.storage_backend.connector.base_connector import RemoteConnector

from curvine_py.core.errors import CurvineError, NotFound
from curvine_py.lmcache.compat import remote_metadata_class
from curvine_py.lmcache.plugin_metrics import plugin_access, prefix_lookup
from curvine_py.lmcache.settings import client_from, parallelism

log = logging.getLogger(__name__)
T = TypeVar("T")
PLUGIN = "curvine"
RemoteMetadata = remote_metadata_class()   # lmcache.v1.protocol <= 0.5.6, lmcache.inprocess.v1.protocol after


def plugin_params(config: Any, plugin_name: str) -> dict[str, Any]:
    """`remote_storage_plugin.<name>.<param>` entries of extra_config, as a dict."""
    prefix = f"remote_storage_plugin.{plugin_name}."
    extra = (config.extra_config if config is not None else None) or {}
    return {k[len(prefix):]: v for k, v in extra.items() if k.startswith(prefix)}


def _log_failure(what: str, key: CacheEngineKey | None, exc: Exception) -> None:
    """A name that is not there (NotFound) is a miss, logged at debug; expected failures (worker
    down, timeout) as one warning line; anything else is a bug in curvine_py and gets its
    traceback, but still becomes a miss for LMCache."""
    name = key.to_string() if key is not None else "-"
    if isinstance(exc, NotFound):
        log.debug("%s %s: a miss (%s)", what, name, exc)
    elif isinstance(exc, CurvineError):
        log.warning("%s %s failed: %s", what, name, exc)
    else:
        log.exception("%s %s failed unexpectedly", what, name)


class CurvineConnector(RemoteConnector):  # type: ignore[misc]
    def __init__(self, loop: asyncio.AbstractEventLoop, local_cpu_backend: Any, config: Any,
                 plugin_name: str = PLUGIN) -> None:
        super().__init__(local_cpu_backend.config, local_cpu_backend.metadata)
        params = plugin_params(config, plugin_name)
        self.loop = loop
        self.local_cpu_backend = local_cpu_backend
        self._client = client_from(params)
        self._kv = self._client.kv
        self._pool = ThreadPoolExecutor(max_workers=parallelism(params), thread_name_prefix="curvine-lmcache")
        self._metrics = plugin_access()
        log.info("curvine connector %s -> master %s", plugin_name, self._client.config.master)

    async def _run(self, func: Callable[..., T], *args: Any) -> T:
        return await self.loop.run_in_executor(self._pool, functools.partial(func, *args))

    # -- single-key operations ---------------------------------------------------------------
    async def exists(self, key: CacheEngineKey) -> bool:
        return await self._run(self.exists_sync, key)

    def exists_sync(self, key: CacheEngineKey) -> bool:
        try:
            found = self._kv.exists(key.to_string())
        except Exception as exc:  # noqa: BLE001 - the cache must never break serving: a miss
            _log_failure("exists", key, exc)
            found = False
        self._metrics.lookup("plugin", found)
        return found

    async def get(self, key: CacheEngineKey) -> MemoryObj | None:
        return await self._run(self._get_sync, key)

    def _get_sync(self, key: CacheEngineKey) -> MemoryObj | None:
        name = key.to_string()
        memory_obj = self.local_cpu_backend.allocate(self.meta_shapes, self.meta_dtypes, self.meta_fmt)
        if memory_obj is None:
            log.debug("no L1 memory for %s", name)
            return None
        target = memoryview(memory_obj.byte_array).cast("B")
        try:
            found = self._kv.get_with_meta(name, target)
        except Exception as exc:  # noqa: BLE001 - the cache must never break serving: a miss
            _log_failure("get", key, exc)
            found = None
        return self._received(memory_obj, target, found)

    def _batched_get_sync(self, keys: builtins.list[CacheEngineKey]) -> builtins.list[MemoryObj | None]:
        """One batched get of the client (pipelined per owner, owners at once) into memory objects
        allocated up front; a key without L1 memory is a miss, as in get()."""
        objs = [self.local_cpu_backend.allocate(self.meta_shapes, self.meta_dtypes, self.meta_fmt) for _ in keys]
        wanted = [i for i, obj in enumerate(objs) if obj is not None]
        targets = {i: memoryview(objs[i].byte_array).cast("B") for i in wanted}
        try:
            found = self._kv.get_many_with_meta([keys[i].to_string() for i in wanted], [targets[i] for i in wanted])
        except Exception as exc:  # noqa: BLE001 - the cache must never break serving: misses
            _log_failure("batched get", keys[0] if keys else None, exc)
            found = [None] * len(wanted)
        results: builtins.list[MemoryObj | None] = [None] * len(keys)
        for index, hit in zip(wanted, found, strict=True):
            results[index] = self._received(objs[index], targets[index], hit)
        return results

    def _received(self, memory_obj: MemoryObj, target: memoryview,
                  found: tuple[memoryview, bytes] | None) -> MemoryObj | None:
        """The memory object for what a get received into `target` (its own), None on a miss."""
        self._metrics.lookup("plugin", found is not None)
        if found is not None:
            self._metrics.bytes_in("plugin", len(found[0]))
        if found is None:
            memory_obj.ref_count_down()
            return None
        data, meta = found
        if meta:
            stored = RemoteMetadata.deserialize(meta)
            if (list(stored.shapes), list(stored.dtypes)) != (list(self.meta_shapes), list(self.meta_dtypes)):
                # Objects written by an engine with another layout (e.g. a partial chunk): allocate
                # exactly what the writer described and copy (rare, not the hot path).
                memory_obj.ref_count_down()
                memory_obj = self.local_cpu_backend.allocate(stored.shapes, stored.dtypes, stored.fmt)
                if memory_obj is None:
                    return None
                exact = memoryview(memory_obj.byte_array).cast("B")
                exact[:len(data)] = data
                return memory_obj
        if len(data) != len(target):
            return self.reshape_partial_chunk(memory_obj, len(data))
        return memory_obj

    async def put(self, key: CacheEngineKey, memory_obj: MemoryObj) -> None:
        await self._run(self._put_sync, key, memory_obj)

    def _put_sync(self, key: CacheEngineKey, memory_obj: MemoryObj) -> None:
        buffer = memoryview(memory_obj.byte_array).cast("B")
        meta = RemoteMetadata(len(buffer), memory_obj.get_shapes(), memory_obj.get_dtypes(),
                              memory_obj.get_memory_format()).serialize()
        try:
            self._kv.put(key.to_string(), buffer, user_meta=meta)
        except Exception as exc:  # noqa: BLE001 - a failed put leaves the key a miss
            _log_failure("put", key, exc)
            return
        self._metrics.bytes_out("plugin", len(buffer))

    def remove_sync(self, key: CacheEngineKey) -> bool:
        try:
            return self._kv.delete(key.to_string())
        except Exception as exc:  # noqa: BLE001
            _log_failure("remove", key, exc)
            return False

    async def list(self) -> list[str]:
        return []

    async def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._client.close()

    # -- batched operations ------------------------------------------------------------------
    def support_ping(self) -> bool:
        return True

    async def ping(self) -> int:
        def check() -> int:
            try:
                self._client.membership.refresh()
                return 0
            except CurvineError:
                return 1
        return await self._run(check)

    def support_batched_get(self) -> bool:
        return True

    async def batched_get(self, keys: builtins.list[CacheEngineKey]) -> builtins.list[MemoryObj | None]:
        return await self._run(self._batched_get_sync, keys)

    def support_batched_put(self) -> bool:
        return True

    async def batched_put(self, keys: builtins.list[CacheEngineKey], memory_objs: builtins.list[MemoryObj]) -> None:
        await asyncio.gather(*(self.put(k, m) for k, m in zip(keys, memory_objs, strict=True)))

    def support_batched_contains(self) -> bool:
        return True

    def batched_contains(self, keys: builtins.list[CacheEngineKey]) -> int:
        try:
            hits = self._kv.exists_prefix([k.to_string() for k in keys])
        except Exception as exc:  # noqa: BLE001 - the cache must never break serving: a miss
            _log_failure("batched contains", keys[0] if keys else None, exc)
            hits = 0
        prefix_lookup(self._metrics, hits, len(keys))
        return hits

    def support_batched_async_contains(self) -> bool:
        return True

    async def batched_async_contains(self, lookup_id: str, keys: builtins.list[CacheEngineKey], pin: bool = False) -> int:
        return await self._run(self.batched_contains, keys)


class CurvineConnectorAdapter(ConnectorAdapter):  # type: ignore[misc]
    """Loaded by LMCache's plugin launcher (no arguments); knows its instance name from the context,
    so several instances (`curvine.a`, `curvine.b`) read their own extra_config keys."""

    def __init__(self) -> None:
        super().__init__(f"plugin://{PLUGIN}")

    def can_parse(self, url: str) -> bool:
        return url.startswith(f"plugin://{PLUGIN}")

    def create_connector(self, context: ConnectorContext) -> RemoteConnector:
        name = context.plugin_name or PLUGIN
        return CurvineConnector(context.loop, context.local_cpu_backend, context.config, name)

"""LMCache multiprocess mode: a `native_plugin` L2 connector.

    lmcache server ... --l2-adapter '{"type": "native_plugin",
        "module_path": "curvine_py.lmcache.native", "class_name": "CurvineNativeConnector",
        "adapter_params": {"master": "10.0.0.1:8995"}}'

Contract (lmcache/v1/distributed/l2_adapters/native_connector_l2_adapter.py): `submit_batch_*`
return a future id at once; the work runs on our threads; each finished batch is queued as
`(future_id, ok, error, per_key_bools)` and signalled on one eventfd that LMCache polls, then
collected with `drain_completions()`.

The keys of one set batch run in parallel on the pool (each key is one request to its owner;
with one batch in flight, a serial loop left the other connections idle: `lmcache bench l2`
stored 32 MiB values at a third of the speed); whichever key finishes last posts the batch's
completion. A get batch is one batched get of the client (KVClient.get_many: pipelined per owner,
owners at once). A key that fails is False in the per-key results, never an exception into LMCache.

Each key looked up counts as a hit or a miss of way `plugin` (plugin_metrics.py), in this process.
"""
from __future__ import annotations

import itertools
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from curvine_py.core.errors import CurvineError, NotFound
from curvine_py.lmcache.plugin_metrics import plugin_access, prefix_lookup
from curvine_py.lmcache.settings import client_from, parallelism

log = logging.getLogger(__name__)

Completion = tuple[int, bool, str, list[bool] | None]


class CurvineNativeConnector:
    def __init__(self, **params: Any) -> None:
        self._client = client_from(params)
        self._kv = self._client.kv
        self._pool = ThreadPoolExecutor(max_workers=parallelism(params), thread_name_prefix="curvine-l2")
        self._event_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._done: list[Completion] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._metrics = plugin_access()

    @property
    def master(self) -> str:
        return str(self._client.config.master)

    def event_fd(self) -> int:
        return self._event_fd

    def _complete(self, completion: Completion) -> None:
        with self._lock:
            self._done.append(completion)
        os.eventfd_write(self._event_fd, 1)

    def _submit(self, work: Callable[[], list[bool]]) -> int:
        """One future for `work`, run on the pool as a whole."""
        future_id = next(self._ids)

        def run() -> None:
            try:
                completion: Completion = (future_id, True, "", work())
            except CurvineError as exc:
                completion = (future_id, False, str(exc), None)
            except Exception as exc:  # a bug must still complete the future, or LMCache waits forever
                log.exception("native connector batch %d failed", future_id)
                completion = (future_id, False, repr(exc), None)
            self._complete(completion)

        self._pool.submit(run)
        return future_id

    def _submit_each(self, keys: list[str], buffers: list[memoryview],
                     one: Callable[[str, memoryview], bool], what: str) -> int:
        """One future for a batch whose keys run in parallel on the pool (per-key bools)."""
        if len(keys) != len(buffers):
            raise ValueError(f"{len(keys)} keys but {len(buffers)} buffers")
        future_id = next(self._ids)
        results = [False] * len(keys)
        remaining = [len(keys)]
        lock = threading.Lock()
        if not keys:
            self._complete((future_id, True, "", []))
            return future_id

        def run(index: int) -> None:
            try:
                results[index] = one(keys[index], memoryview(buffers[index]).cast("B"))
            except NotFound:   # a miss, not a failure
                log.debug("%s %s: a miss", what, keys[index])
            except CurvineError as exc:
                log.warning("%s %s failed: %s", what, keys[index], exc)
            except Exception:  # a bug must still complete the future, or LMCache waits forever
                log.exception("native connector: %s %s failed", what, keys[index])
            with lock:
                remaining[0] -= 1
                last = remaining[0] == 0
            if last:
                self._complete((future_id, True, "", results))

        for index in range(len(keys)):
            self._pool.submit(run, index)
        return future_id

    def submit_batch_get(self, keys: list[str], buffers: list[memoryview]) -> int:
        if len(keys) != len(buffers):
            raise ValueError(f"{len(keys)} keys but {len(buffers)} buffers")

        def work() -> list[bool]:
            # One batched get: each owner's keys pipelined on its connections, owners at once.
            targets = [memoryview(b).cast("B") for b in buffers]
            try:
                got = self._kv.get_many(keys, targets)
            except Exception as exc:   # noqa: BLE001 - one bad key must not fail the others: one by one
                log.warning("batched get of %d keys failed (%r): getting them one by one", len(keys), exc)
                return self._counted([self._get_one(key, target) for key, target in zip(keys, targets, strict=True)],
                                     targets)
            return self._counted([data is not None and len(data) == len(target)
                                  for data, target in zip(got, targets, strict=True)], targets)
        return self._submit(work)

    def _counted(self, hits: list[bool], targets: list[memoryview]) -> list[bool]:
        for hit, target in zip(hits, targets, strict=True):
            self._metrics.lookup("plugin", hit)
            if hit:
                self._metrics.bytes_in("plugin", len(target))
        return hits

    def _get_one(self, key: str, target: memoryview) -> bool:
        try:
            return self._kv.get_into(key, target) == len(target)
        except NotFound:   # a miss, not a failure
            log.debug("get %s: a miss", key)
        except CurvineError as exc:
            log.warning("get %s failed: %s", key, exc)
        except Exception:  # a bug must still complete the future, or LMCache waits forever
            log.exception("native connector: get %s failed", key)
        return False

    def submit_batch_set(self, keys: list[str], buffers: list[memoryview]) -> int:
        def put(key: str, data: memoryview) -> bool:
            self._kv.put(key, data)
            self._metrics.bytes_out("plugin", len(data))
            return True
        return self._submit_each(keys, buffers, put, "put")

    def submit_batch_exists(self, keys: list[str]) -> int:
        def work() -> list[bool]:
            # LMCache loads the hit prefix of a lookup; keys after the first miss are reported
            # missing (one batched EXISTS per owner instead of a round trip per key).
            hits = self._kv.exists_prefix(keys, pin=True)
            prefix_lookup(self._metrics, hits, len(keys))
            return [i < hits for i in range(len(keys))]
        return self._submit(work)

    def submit_batch_delete(self, keys: list[str]) -> int:
        return self._submit(lambda: [self._kv.delete(key) for key in keys])

    def drain_completions(self) -> list[Completion]:
        try:
            os.eventfd_read(self._event_fd)
        except BlockingIOError:
            pass
        with self._lock:
            done, self._done = self._done, []
        return done

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._client.close()
        os.close(self._event_fd)

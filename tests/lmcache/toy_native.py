"""An in-memory `native_plugin` L2 connector for LMCache's multiprocess mode, in pure Python.

It exists to test the MP harness path ({"type": "native_plugin", "module_path":
"tests.lmcache.toy_native", "class_name": "DictNativeConnector"}) and as the reference for the
contract our real connector implements (lmcache/v1/distributed/l2_adapters/
native_connector_l2_adapter.py, 0.5.6):

- constructed as cls(**adapter_params);
- event_fd() -> int, readable while completions are pending (LMCache's demux thread polls it
  with POLLIN and then calls drain_completions(): the fd must be reset there or poll spins);
- submit_batch_set/get(keys: list[str], bufs: list[memoryview]) -> future id, submit_batch_exists
  (keys) -> future id, optional submit_batch_delete(keys);
- drain_completions() -> [(future_id, ok, error, per_key_bools | None)];
- close().
Buffers are LMCache's L1 memory as ctypes '<B' views: cast to 'B' before slicing or writing.
Every operation here completes inside submit (a dict is fast enough); completion still goes
through the eventfd, as it must for a real asynchronous client.
"""
from __future__ import annotations

import os
import threading
from typing import Any


class DictNativeConnector:
    def __init__(self, **params: Any) -> None:
        self.params = params
        self._data: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self._done: list[tuple[int, bool, str, list[bool] | None]] = []
        self._next_id = 1
        self._efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)

    def event_fd(self) -> int:
        return self._efd

    def _complete(self, ok: bool, error: str, bools: list[bool] | None) -> int:
        with self._lock:
            fid = self._next_id
            self._next_id += 1
            self._done.append((fid, ok, error, bools))
        os.eventfd_write(self._efd, 1)
        return fid

    def submit_batch_set(self, keys: list[str], bufs: list[memoryview]) -> int:
        with self._lock:
            for key, buf in zip(keys, bufs, strict=True):
                self._data[key] = bytes(memoryview(buf).cast("B"))
        return self._complete(True, "", None)

    def submit_batch_get(self, keys: list[str], bufs: list[memoryview]) -> int:
        found = []
        with self._lock:
            for key, buf in zip(keys, bufs, strict=True):
                value = self._data.get(key)
                dest = memoryview(buf).cast("B")
                if value is None or len(value) > len(dest):
                    found.append(False)
                    continue
                dest[:len(value)] = value
                found.append(True)
        return self._complete(True, "", found)

    def submit_batch_exists(self, keys: list[str]) -> int:
        with self._lock:
            found = [key in self._data for key in keys]
        return self._complete(True, "", found)

    def submit_batch_delete(self, keys: list[str]) -> int:
        with self._lock:
            found = [self._data.pop(key, None) is not None for key in keys]
        return self._complete(True, "", found)

    def drain_completions(self) -> list[tuple[int, bool, str, list[bool] | None]]:
        try:
            os.eventfd_read(self._efd)
        except BlockingIOError:
            pass
        with self._lock:
            done, self._done = self._done, []
        return done

    def close(self) -> None:
        try:
            os.close(self._efd)
        except OSError:
            pass

"""CurvineNativeConnector's side of LMCache's native_plugin contract, without LMCache or a cluster:
completions through the eventfd, per-key results, failures that never escape (a miss, an error,
a bug in one key leave the other keys' results intact and the batch completed)."""
from __future__ import annotations

import os
import select
import threading
from collections.abc import Iterator

import pytest

from curvine_py.core.errors import Unavailable
from curvine_py.lmcache.native import Completion, CurvineNativeConnector


class FakeKV:
    """Objects in a dict; keys named 'down*' raise Unavailable, 'bug*' raise a plain bug."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.lock = threading.Lock()

    def _check(self, key: str) -> None:
        if key.startswith("down"):
            raise Unavailable("worker down")
        if key.startswith("bug"):
            raise ZeroDivisionError("a bug")

    def put(self, key: str, data: memoryview) -> None:
        self._check(key)
        with self.lock:
            self.data[key] = bytes(data)

    def get_into(self, key: str, out: memoryview) -> int | None:
        self._check(key)
        with self.lock:
            value = self.data.get(key)
        if value is None:
            return None
        out[:len(value)] = value
        return len(value)

    def get_many(self, keys: list[str], outs: list[memoryview]) -> list[memoryview | None]:
        """As KVClient.get_many: an owner that cannot be reached is a miss; a bug raises."""
        results: list[memoryview | None] = []
        for key, out in zip(keys, outs, strict=True):
            try:
                n = self.get_into(key, out)
            except Unavailable:
                n = None
            results.append(None if n is None else out[:n])
        return results

    def exists_prefix(self, keys: list[str], pin: bool = True) -> int:
        for index, key in enumerate(keys):
            if key not in self.data:
                return index
        return len(keys)

    def delete(self, key: str) -> bool:
        return self.data.pop(key, None) is not None


@pytest.fixture
def conn() -> Iterator[CurvineNativeConnector]:
    connector = CurvineNativeConnector(num_workers=3, master="127.0.0.1:1")   # never dialled
    connector._kv = FakeKV()  # type: ignore[assignment]
    yield connector
    connector.close()


def wait(conn: CurvineNativeConnector, future_id: int, timeout: float = 10.0) -> Completion:
    """Polls the eventfd the way LMCache's demux thread does, until `future_id` completes."""
    pending: dict[int, Completion] = {}
    poller = select.poll()
    poller.register(conn.event_fd(), select.POLLIN)
    while future_id not in pending:
        assert poller.poll(int(timeout * 1000)), f"no completion for {future_id}"
        for done in conn.drain_completions():
            pending[done[0]] = done
    return pending[future_id]


def buffers(*sizes: int) -> list[memoryview]:
    return [memoryview(bytearray(size)) for size in sizes]


def test_set_then_get_and_exists(conn: CurvineNativeConnector) -> None:
    keys = [f"k{i}" for i in range(6)]
    data = [memoryview(bytearray(os.urandom(1000 + i))) for i in range(6)]
    assert wait(conn, conn.submit_batch_set(keys, data)) == (1, True, "", [True] * 6)
    out = buffers(*(len(d) for d in data))
    future = conn.submit_batch_get(keys, out)
    assert wait(conn, future)[1:] == (True, "", [True] * 6)
    assert [bytes(o) for o in out] == [bytes(d) for d in data]
    assert wait(conn, conn.submit_batch_exists([*keys[:3], "absent", keys[4]]))[3] == [True] * 3 + [False] * 2


def test_failures_are_per_key_and_the_batch_completes(conn: CurvineNativeConnector) -> None:
    keys = ["a", "down-1", "b", "bug-1", "c"]
    done = wait(conn, conn.submit_batch_set(keys, buffers(10, 10, 10, 10, 10)))
    assert done[1:] == (True, "", [True, False, True, False, True])
    done = wait(conn, conn.submit_batch_get(["a", "missing", "down-2", "bug-2", "c"], buffers(10, 10, 10, 10, 10)))
    assert done[1:] == (True, "", [True, False, False, False, True])


def test_empty_batch_and_delete(conn: CurvineNativeConnector) -> None:
    assert wait(conn, conn.submit_batch_get([], []))[1:] == (True, "", [])
    wait(conn, conn.submit_batch_set(["x"], buffers(4)))
    assert wait(conn, conn.submit_batch_delete(["x", "y"]))[3] == [True, False]

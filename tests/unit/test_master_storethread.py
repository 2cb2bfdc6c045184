"""The store thread: calls run off the event loop, concurrent calls are group-committed, every
answer is released only after its batch is durable, and one failing call does not spoil others."""
from __future__ import annotations

import asyncio
import pathlib
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from curvine_py.core.errors import AlreadyExists, CurvineError
from curvine_py.master.namespace import Namespace
from curvine_py.master.storethread import StoreThread
from curvine_py.master.types import ROOT_INO, FileType
from tests.unit.test_master_support import FakeClock, open_store


@pytest.fixture
def ns(tmp_path: pathlib.Path) -> Iterator[Namespace]:
    store = open_store(tmp_path, FakeClock())
    yield store
    store.close()


def test_concurrent_calls_are_group_committed_and_durable(ns: Namespace) -> None:
    store = StoreThread(ns)
    store.start()
    observer = sqlite3.connect(ns.path)           # a second reader sees only committed data

    async def create(i: int) -> int:
        attr = await store.call(ns.create, ROOT_INO, f"f{i}", FileType.REGULAR, 0o644)
        visible = observer.execute("SELECT COUNT(*) FROM dentries WHERE parent=1 AND name=?",
                                   (f"f{i}",)).fetchone()[0]
        assert visible == 1, "answered before the commit"
        return attr.ino

    async def main() -> list[int]:
        return await asyncio.gather(*(create(i) for i in range(300)))

    inos = asyncio.run(main())
    store.stop()
    assert len(set(inos)) == 300
    assert store.calls == 300
    assert store.batches < 300            # concurrent calls shared commits
    assert len(ns.readdir(ROOT_INO, limit=1000)[0]) == 300
    assert ns.check() == []
    observer.close()


def test_a_failing_call_does_not_spoil_its_batch(ns: Namespace) -> None:
    store = StoreThread(ns)
    store.start()

    async def main() -> list[object]:
        return await asyncio.gather(
            *(store.call(ns.create, ROOT_INO, "same", FileType.REGULAR, 0o644) for _ in range(20)),
            *(store.call(ns.create, ROOT_INO, f"other{i}", FileType.REGULAR, 0o644) for i in range(20)),
            return_exceptions=True)

    results = asyncio.run(main())
    store.stop()
    same, others = results[:20], results[20:]
    assert sum(not isinstance(r, BaseException) for r in same) == 1
    assert all(isinstance(r, AlreadyExists) for r in same if isinstance(r, BaseException))
    assert not any(isinstance(r, BaseException) for r in others)
    assert len(ns.readdir(ROOT_INO)[0]) == 21
    assert ns.check() == []


def test_calls_run_on_the_store_thread(ns: Namespace) -> None:
    store = StoreThread(ns, name="the-store")
    store.start()

    async def main() -> str:
        return await store.call(lambda: threading.current_thread().name)

    assert asyncio.run(main()) == "the-store"
    store.stop()


class _FailingCommit:
    """A store whose COMMIT fails: nothing of the batch is durable, so every call must fail."""

    @contextmanager
    def batch(self) -> Iterator[None]:
        yield
        raise sqlite3.OperationalError("disk I/O error")


def test_a_failed_commit_fails_every_call_of_the_batch() -> None:
    store = StoreThread(_FailingCommit())  # type: ignore[arg-type]
    store.start()

    async def main() -> list[object]:
        return await asyncio.gather(*(store.call(lambda: 42) for _ in range(5)), return_exceptions=True)

    results = asyncio.run(main())
    store.stop()
    assert all(isinstance(r, CurvineError) and "commit failed" in str(r) for r in results)


def test_stop_finishes_queued_calls(ns: Namespace) -> None:
    store = StoreThread(ns)
    store.start()

    async def main() -> list[object]:
        tasks = [asyncio.ensure_future(store.call(ns.create, ROOT_INO, f"q{i}", FileType.REGULAR, 0o644))
                 for i in range(10)]
        await asyncio.sleep(0)
        await asyncio.get_running_loop().run_in_executor(None, store.stop)
        return await asyncio.gather(*tasks)

    assert len(asyncio.run(main())) == 10

"""The store thread: calls from many handler threads run on one thread, concurrent calls are
group-committed, every answer is released only after its batch is durable, and one failing call
does not spoil others."""
from __future__ import annotations

import pathlib
import sqlite3
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

from curvine_py.core.errors import AlreadyExists, CurvineError, DirectoryNotEmpty, NotFound
from curvine_py.master.namespace import Namespace
from curvine_py.master.storethread import StoreThread
from curvine_py.master.types import ROOT_INO, Attr, FileType, UnlinkResult
from tests.harness import wait_until
from tests.unit.test_master_support import FakeClock, open_store

pytestmark = pytest.mark.usefixtures("meta_engine")   # every test on SQLite and on PostgreSQL


@pytest.fixture
def ns(tmp_path: pathlib.Path) -> Iterator[Namespace]:
    store = open_store(tmp_path, FakeClock())
    yield store
    store.close()


def test_concurrent_calls_are_group_committed_and_durable(ns: Namespace) -> None:
    store = StoreThread(ns)
    store.start()
    observer = ns.reader()         # a second connection sees only committed data
    observing = threading.Lock()   # one connection, one thread at a time

    def create(i: int) -> int:
        attr = store.call(ns.create, ROOT_INO, f"f{i}", FileType.REGULAR, 0o644)
        with observing, observer.snapshot():
            visible = observer.lookup(ROOT_INO, f"f{i}")
        assert visible.ino == attr.ino, "answered before the commit"
        return attr.ino

    with ThreadPoolExecutor(16) as pool:
        inos = list(pool.map(create, range(300)))
    store.stop()
    assert len(set(inos)) == 300
    assert store.calls == 300
    assert store.batches < 300            # concurrent calls shared commits
    assert len(ns.readdir(ROOT_INO, limit=1000)[0]) == 300
    assert ns.check() == []
    observer.close()


def _gather(*calls: Any) -> list[object]:
    """Runs each zero-argument call in its own thread at once; results or exceptions, in order."""
    def outcome(call: Any) -> object:
        try:
            return call()
        except Exception as exc:  # noqa: BLE001 - the call's answer
            return exc

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(outcome, calls))


def test_a_failing_call_does_not_spoil_its_batch(ns: Namespace) -> None:
    store = StoreThread(ns)
    store.start()

    results = _gather(
        *(lambda: store.call(ns.create, ROOT_INO, "same", FileType.REGULAR, 0o644) for _ in range(20)),
        *(lambda i=i: store.call(ns.create, ROOT_INO, f"other{i}", FileType.REGULAR, 0o644) for i in range(20)))
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

    assert store.call(lambda: threading.current_thread().name) == "the-store"
    store.stop()


class _FailingCommit:
    """A store whose COMMIT fails: nothing of the batch is durable, so every call must fail."""

    @contextmanager
    def batch(self, calls: int = 0, *, deferring: bool = False,
              then: Callable[[CurvineError | None], None] | None = None) -> Iterator[None]:
        yield
        raise sqlite3.OperationalError("disk I/O error")   # `then` is never told: the block raised


def test_a_failed_commit_fails_every_call_of_the_batch() -> None:
    store = StoreThread(_FailingCommit())  # type: ignore[arg-type]
    store.start()

    results = _gather(*(lambda: store.call(lambda: 42) for _ in range(5)))
    store.stop()
    assert all(isinstance(r, CurvineError) and "commit failed" in str(r) for r in results)


def test_stop_finishes_queued_calls(ns: Namespace) -> None:
    store = StoreThread(ns)
    store.start()
    release = threading.Event()
    with ThreadPoolExecutor(11) as pool:
        blocker = pool.submit(store.call, release.wait)      # holds the store thread
        queued = [pool.submit(store.call, ns.create, ROOT_INO, f"q{i}", FileType.REGULAR, 0o644)
                  for i in range(10)]
        stopper = pool.submit(store.stop)
        release.set()
        stopper.result(timeout=10)
        assert blocker.result(timeout=10) is True
        assert len({f.result(timeout=10).ino for f in queued}) == 10


def test_a_call_after_stop_is_refused(ns: Namespace) -> None:
    store = StoreThread(ns)
    store.start()
    store.stop()
    with pytest.raises(CurvineError, match="stopped"):
        store.call(lambda: 1)


def test_a_reader_sees_committed_state_only_and_cannot_write(ns: Namespace) -> None:
    reader = ns.reader()
    try:
        with ns.batch():    # open write transaction: not yet committed, so not yet acknowledged
            ns.create(ROOT_INO, "pending", FileType.REGULAR, 0o644)
            with reader.snapshot(), pytest.raises(NotFound):
                reader.lookup(ROOT_INO, "pending")
        with reader.snapshot():
            assert reader.lookup(ROOT_INO, "pending").type == FileType.REGULAR
        # opened read-only (SQLite: query_only; PostgreSQL: default_transaction_read_only)
        with pytest.raises((sqlite3.OperationalError, psycopg.errors.ReadOnlySqlTransaction)):
            reader.create(ROOT_INO, "sneaky", FileType.REGULAR, 0o644)
        with pytest.raises(NotFound):
            ns.lookup(ROOT_INO, "sneaky")
    finally:
        reader.close()


def test_a_statement_failing_in_flight_fails_its_own_call_only(ns: Namespace) -> None:
    """On PostgreSQL a statement whose result nobody reads is only sent (pipeline mode): its error
    arrives later. It must still fail its own unit, roll back that unit's other writes, and leave the
    batch's other calls to commit (SQLite raises at once; the outcome is the same)."""
    duplicate = (sqlite3.IntegrityError, psycopg.errors.UniqueViolation)
    with ns.batch():
        ns.create(ROOT_INO, "a", FileType.REGULAR, 0o644)
        with pytest.raises(duplicate), ns.transaction():
            ns._db.execute("INSERT INTO xattrs (ino, name, value) VALUES (?, ?, ?)", (ROOT_INO, "user.partial", b"x"))
            ns._db.execute("INSERT INTO dentries (parent, name, ino) VALUES (?, 'a', 999)", (ROOT_INO,))
        # A failure of the code itself, while a failed statement is still in flight.
        with pytest.raises((NotFound, *duplicate)), ns.transaction():
            ns._db.execute("INSERT INTO xattrs (ino, name, value) VALUES (?, ?, ?)", (ROOT_INO, "user.partial2", b"y"))
            ns._db.execute("INSERT INTO dentries (parent, name, ino) VALUES (?, 'a', 998)", (ROOT_INO,))
            raise NotFound("after a statement that failed in flight")
        ns.create(ROOT_INO, "b", FileType.REGULAR, 0o644)
    assert [e.name for e in ns.readdir(ROOT_INO)[0]] == ["a", "b"]
    assert ns.listxattr(ROOT_INO) == []
    assert not ns._db.in_transaction


def test_one_batch_answers_each_call_its_own(ns: Namespace) -> None:
    """A batch of queued calls, on PostgreSQL sent without waiting for each answer (pgfast.Deferred):
    every call still gets its own result or error, in the order they were queued, and a call that
    uses its create's answer inside itself gets it then."""
    ns.create(ROOT_INO, "old", FileType.REGULAR, 0o644)
    full = ns.create(ROOT_INO, "full", FileType.DIRECTORY, 0o755)
    ns.create(full.ino, "x", FileType.REGULAR, 0o644)
    store = StoreThread(ns)
    store.start()
    release, holding = threading.Event(), threading.Event()

    def hold() -> bool:
        holding.set()
        return release.wait()

    calls: list[Any] = [
        lambda: ns.create(ROOT_INO, "a", FileType.REGULAR, 0o644),
        lambda: ns.create(ROOT_INO, "a", FileType.REGULAR, 0o644),                  # EEXIST
        lambda: ns.create(999_999, "b", FileType.REGULAR, 0o644),                   # ENOENT
        lambda: ns.unlink(ROOT_INO, "nope"),                                         # ENOENT
        lambda: ns.unlink(ROOT_INO, "old"),
        lambda: ns.create(ROOT_INO, "a", FileType.REGULAR, 0o644, exclusive=False),  # the one made above
        lambda: ns.getattr(ns.create(ROOT_INO, "c", FileType.REGULAR, 0o644).ino).ino,
        lambda: ns.unlink(ROOT_INO, "full", directory=True),                         # ENOTEMPTY
        lambda: ns.create(ROOT_INO, "d", FileType.DIRECTORY, 0o755),
    ]
    with ThreadPoolExecutor(len(calls) + 1) as pool:
        pool.submit(store.call, hold)                        # holds the store thread
        assert holding.wait(5)
        futures = []
        for index, call in enumerate(calls):                 # queued one after the other, in this order
            futures.append(pool.submit(store.call, call))
            wait_until(lambda n=index + 1: store._queue.qsize() == n, 5, "the call queued")
        release.set()
        outcomes = []
        for future in futures:
            try:
                outcomes.append(future.result(timeout=30))
            except CurvineError as exc:
                outcomes.append(exc)
    store.stop()
    assert store.batches == 2 and store.calls == len(calls) + 1        # the queued calls shared one batch
    made, exists, no_parent, no_name, unlinked, again, c_ino, not_empty, d = outcomes
    assert isinstance(exists, AlreadyExists) and str(exists) == "'a' exists in 1"
    assert isinstance(no_parent, NotFound) and str(no_parent) == "no inode 999999"
    assert isinstance(no_name, NotFound) and str(no_name) == "'nope' not found in 1"
    assert isinstance(not_empty, DirectoryNotEmpty)
    assert isinstance(made, Attr) and isinstance(again, Attr) and again.ino == made.ino
    assert isinstance(unlinked, UnlinkResult) and unlinked.nlink == 0
    assert c_ino == ns.lookup(ROOT_INO, "c").ino
    assert isinstance(d, Attr) and d.type == FileType.DIRECTORY and d.nlink == 2
    assert [e.name for e in ns.readdir(ROOT_INO)[0]] == ["a", "c", "d", "full"]
    assert ns.getattr(ROOT_INO).nlink == 4
    assert ns.check() == []

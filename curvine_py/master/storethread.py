"""The one thread that touches the master's database (SQLite, or PostgreSQL's one writer session),
with group commit.

Why one thread: SQLite serialises writers anyway, and keeping every write on one thread removes
locking from the store and leaves the gRPC handler threads free to take RPCs while a commit fsyncs.

Group commit: while a batch is being executed and fsynced, new calls queue up; the next batch runs
all of them inside one transaction (a store operation of the general path as its own SAVEPOINT, so
a failing call rolls back only itself; on PostgreSQL a one-statement operation needs none, and may
answer after the COMMIT: store/pgfast.py, `_resolved` below) and makes them durable with one COMMIT.
No reply (not even for a read, which may have seen an earlier call's uncommitted write in the same
batch) is released before that COMMIT returned.

Overlap (PostgreSQL): a batch's COMMIT may be left in flight (`Database.batch(then=...)`). When calls
are queued by then, the next batch starts at once and its one-statement calls travel behind that
COMMIT, so the store thread's work and their round trip overlap the server's fsync; the batch before
is answered (`then`) as soon as its COMMIT's answer is in, always before the next one. With nothing
queued, the thread waits for the answer (`settle`) before it waits for calls.

Error handling: an exception raised by a call is that call's answer. If the COMMIT itself fails,
every call of the batch fails with an I/O error (none of them is durable); with Unavailable when
the PostgreSQL session broke (the engine reconnects before the next batch, store/pgengine.py).
"""
from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

from curvine_py.core.errors import CurvineError
from curvine_py.master.namespace import Namespace
from curvine_py.master.store.pgfast import Deferred

log = logging.getLogger(__name__)

T = TypeVar("T")
MAX_BATCH = 256   # bounds the latency one batch adds to the calls queued behind it


@dataclass(slots=True)
class _Call:
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    future: Future[Any]


def _resolved(ok: bool, value: Any) -> tuple[bool, Any]:
    """A call's answer that PostgreSQL sent after the call returned (pgfast.Deferred: read with the
    COMMIT's round trip), as its result or its own error."""
    if ok and isinstance(value, Deferred):
        try:
            return True, value.resolve()
        except Exception as exc:  # noqa: BLE001 - the call's own answer
            return False, exc
    return ok, value


class StoreThread:
    def __init__(self, ns: Namespace, *, max_batch: int = MAX_BATCH, name: str = "master-store",
                 overlap: bool = True) -> None:
        self._ns = ns
        self._max_batch = max_batch
        self._overlap = overlap   # False: every batch waits for its own COMMIT (bench/meta_overlap.py's baseline)
        self._queue: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.batches = 0
        self.calls = 0
        self._unsettled = 0       # batches whose COMMIT is in flight (PostgreSQL): `finish` not called yet

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Finishes the calls already queued, then ends the thread."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """fn(*args) on the store thread; returns (or raises) once its batch is durable."""
        if not self._thread.is_alive():
            raise CurvineError("the metadata store is stopped")
        future: Future[T] = Future()
        self._queue.put(_Call(fn, args, future))
        return future.result()

    def _run(self) -> None:
        while True:
            if self._unsettled:
                try:
                    first = self._queue.get_nowait()
                except queue.Empty:
                    self._settle()        # nothing to overlap with: wait for the COMMIT in flight
                    continue
            else:
                first = self._queue.get()
            if first is None:
                self._settle()
                return
            batch = [first]
            stopping = False
            while len(batch) < self._max_batch:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stopping = True
                    break
                batch.append(item)
            self._execute(batch)
            if stopping:
                self._settle()
                return

    def _settle(self) -> None:
        try:
            self._ns.settle()
        except Exception:     # settle tells the batch itself; the thread must not end here
            log.exception("waiting for a commit in flight failed")

    def _execute(self, batch: list[_Call]) -> None:
        results: list[tuple[bool, Any]] = []
        told = False

        def finish(error: CurvineError | None) -> None:
            """The batch's COMMIT answered (now or, on PostgreSQL, during a later batch)."""
            nonlocal told
            told = True
            self._unsettled -= 1
            if error is not None:
                log.warning("commit of a batch of %d calls failed: %s", len(batch), error.message)
                self._answer(batch, [(False, error) for _ in batch])
            else:
                self._answer(batch, [_resolved(ok, value) for ok, value in results])

        self._unsettled += 1
        try:
            with self._ns.batch(len(batch), deferring=True, then=finish if self._overlap else None):
                for call in batch:
                    try:
                        results.append((True, call.fn(*call.args)))
                    except Exception as exc:  # noqa: BLE001 - the call's own answer
                        results.append((False, exc))
        except CurvineError as exc:   # Unavailable, NotLeader (PostgreSQL): the engine's own words
            log.warning("a batch of %d calls failed: %s", len(batch), exc.message)
            failed = [(False, exc) for _ in batch]
        except Exception as exc:  # COMMIT failed: nothing of this batch is durable
            log.exception("commit of a batch of %d calls failed", len(batch))
            failed = [(False, CurvineError(f"metadata commit failed: {exc}")) for _ in batch]
        else:
            if not self._overlap:
                finish(None)
            return
        if not told:
            self._unsettled -= 1
            self._answer(batch, failed)

    def _answer(self, batch: list[_Call], results: list[tuple[bool, Any]]) -> None:
        self.batches += 1
        self.calls += len(batch)
        for call, (ok, value) in zip(batch, results, strict=True):
            if ok:
                call.future.set_result(value)
            else:
                call.future.set_exception(value)

"""fuse/coalesce.py: creates arriving while calls are in flight share the next call; every caller
gets its own answer; a failed or cancelled call never leaves a caller waiting."""
from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence

import trio
import trio.testing

from curvine_py.core.errors import AlreadyExists, CurvineError, Timeout
from curvine_py.fuse.coalesce import Coalescer


def trio_test(test: Callable[[], Awaitable[None]]) -> Callable[[], None]:
    @functools.wraps(test)
    def run() -> None:
        trio.run(test)
    return run


class Master:
    """Answers name -> name.upper(); "dup*" names already exist; `fail` makes the call itself fail."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.gate = trio.Event()
        self.fail: CurvineError | None = None

    async def _answer(self, names: list[str]) -> list[str | CurvineError]:
        self.calls.append(names)
        await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        return [AlreadyExists(n) if n.startswith("dup") else n.upper() for n in names]

    async def one(self, name: str) -> str:
        result = (await self._answer([name]))[0]
        if isinstance(result, CurvineError):
            raise result
        return result

    async def many(self, names: list[str]) -> Sequence[str | CurvineError]:
        return await self._answer(names)


async def _start(nursery: trio.Nursery, coalescer: Coalescer[str, str], names: list[str],
                 results: dict[str, str | BaseException]) -> None:
    """Starts one caller per name, in order, each one blocked before the next starts."""
    async def one(name: str) -> None:
        try:
            results[name] = await coalescer.call(name)
        except CurvineError as exc:
            results[name] = exc

    for name in names:
        nursery.start_soon(one, name)
        await trio.testing.wait_all_tasks_blocked()


@trio_test
async def test_a_lone_create_is_sent_alone_and_at_once() -> None:
    master = Master()
    master.gate.set()
    coalescer = Coalescer(master.one, master.many)
    assert await coalescer.call("a") == "A"
    assert master.calls == [["a"]]


@trio_test
async def test_creates_behind_busy_calls_share_one_call_with_their_own_answers() -> None:
    master = Master()
    coalescer = Coalescer(master.one, master.many, max_in_flight=2)
    results: dict[str, str | BaseException] = {}
    async with trio.open_nursery() as nursery:
        await _start(nursery, coalescer, ["a", "b", "c", "dup", "e"], results)
        assert master.calls == [["a"], ["b"]], "two calls in flight, the rest queue"
        master.gate.set()
    assert master.calls[2] == ["c", "dup", "e"], "the queue went out as one call, in order"
    assert len(master.calls) == 3
    assert {k: v for k, v in results.items() if k != "dup"} == {"a": "A", "b": "B", "c": "C", "e": "E"}
    assert isinstance(results["dup"], AlreadyExists), "one create's error is its own"
    assert (coalescer.calls, coalescer.requests) == (3, 5)


@trio_test
async def test_a_failed_call_fails_each_of_its_creates() -> None:
    master = Master()
    master.fail = Timeout("master unreachable")
    coalescer = Coalescer(master.one, master.many, max_in_flight=1)
    results: dict[str, str | BaseException] = {}
    async with trio.open_nursery() as nursery:
        await _start(nursery, coalescer, ["a", "b", "c"], results)
        master.gate.set()
    assert all(isinstance(results[n], Timeout) for n in "abc")
    assert results["b"] is not results["c"], "each caller raises its own exception object"


@trio_test
async def test_cancelled_callers_leave_nobody_stuck() -> None:
    master = Master()
    coalescer = Coalescer(master.one, master.many, max_in_flight=1)
    results: dict[str, str | BaseException] = {}
    async with trio.open_nursery() as nursery:
        leader_scope = trio.CancelScope()           # the caller whose call is in flight
        nursery.start_soon(_cancellable, coalescer, "a", leader_scope, results)
        await trio.testing.wait_all_tasks_blocked()
        queued_scope = trio.CancelScope()
        nursery.start_soon(_cancellable, coalescer, "b", queued_scope, results)
        await trio.testing.wait_all_tasks_blocked()
        await _start(nursery, coalescer, ["c"], results)
        queued_scope.cancel()                       # a queued caller gives up
        leader_scope.cancel()                       # and so does the one in flight
        await trio.testing.wait_all_tasks_blocked()
        master.gate.set()
    assert results["c"] == "C", "the remaining caller still got its answer"
    assert "b" not in results and master.calls[-1] == ["c"], "the cancelled queued create was not sent"


async def _cancellable(coalescer: Coalescer[str, str], name: str, scope: trio.CancelScope,
                       results: dict[str, str | BaseException]) -> None:
    with scope:
        results[name] = await coalescer.call(name)



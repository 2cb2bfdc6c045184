"""Creates that arrive while another create is in flight share the next master call.

A create is sent at once while fewer than MAX_IN_FLIGHT calls are in flight (no added latency);
otherwise it queues. When a call returns, the first queued caller becomes the leader of the next
call and sends the whole queue (up to MAX_BATCH) as one call. Each
caller gets its own answer: the created inode's attributes or its own error. Under parallel creates
this spends one gRPC round trip on several creates (gRPC-python's per-call CPU is what limits the
create rate on a small machine) and the master commits them with one fsync.

A failure of the shared call itself (timeout, master unreachable) is every caller's answer: none of
them knows whether its create happened, as with a lone call.
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import trio

from curvine_py.core.errors import CurvineError, from_errno

Req = TypeVar("Req")
Res = TypeVar("Res")

MAX_BATCH = 64
MAX_IN_FLIGHT = 2     # calls at once: a second one hides the first one's commit (fsync) latency


@dataclass(slots=True)
class _Waiter(Generic[Req, Res]):
    request: Req
    wake: trio.Event = field(default_factory=trio.Event)
    result: Res | None = None
    error: BaseException | None = None
    answered: bool = False


class Coalescer(Generic[Req, Res]):
    def __init__(self, send_one: Callable[[Req], Awaitable[Res]],
                 send_many: Callable[[list[Req]], Awaitable[Sequence[Res | CurvineError]]],
                 *, max_batch: int = MAX_BATCH, max_in_flight: int = MAX_IN_FLIGHT) -> None:
        self._send_one = send_one
        self._send_many = send_many
        self._max_batch = max_batch
        self._max_in_flight = max_in_flight
        self._queue: list[_Waiter[Req, Res]] = []
        self._in_flight = 0     # calls being sent, plus a leader woken but not yet running
        self.calls = 0          # master calls made (for tests and curiosity)
        self.requests = 0

    async def call(self, request: Req) -> Res:
        me: _Waiter[Req, Res] = _Waiter(request)
        if self._in_flight < self._max_in_flight and not self._queue:
            self._in_flight += 1
            batch = [me]
        else:
            self._queue.append(me)
            try:
                await me.wake.wait()
            except BaseException:      # cancelled while queued
                if not me.answered:
                    if me.wake.is_set():        # made leader: give the slot back
                        self._in_flight -= 1
                    self._queue.remove(me)
                    self._hand_over()
                raise
            if me.answered:
                return self._answer(me)
            # Made leader (a slot is reserved for us): our request heads the queue.
            batch, self._queue = self._queue[:self._max_batch], self._queue[self._max_batch:]
        try:
            await self._send(batch)
        finally:
            for waiter in batch:     # cancelled mid-call: nobody is left waiting forever
                if not waiter.answered:
                    waiter.error, waiter.answered = CurvineError("create abandoned: its call was cancelled"), True
                    waiter.wake.set()
            self._in_flight -= 1
            self._hand_over()
        return self._answer(me)

    def _hand_over(self) -> None:
        """Wakes the first queued caller as the leader of the next call, when a slot is free."""
        if self._queue and self._in_flight < self._max_in_flight and not self._queue[0].wake.is_set():
            self._in_flight += 1
            self._queue[0].wake.set()

    async def _send(self, batch: list[_Waiter[Req, Res]]) -> None:
        self.calls += 1
        self.requests += len(batch)
        try:
            if len(batch) == 1:
                results: Sequence[Res | CurvineError] = [await self._send_one(batch[0].request)]
            else:
                results = await self._send_many([waiter.request for waiter in batch])
        except CurvineError as exc:     # the shared call failed: each caller gets its own copy
            results = [from_errno(exc.errno, exc.message) for _ in batch]
        for waiter, result in zip(batch, results, strict=True):
            if isinstance(result, CurvineError):
                waiter.error = result
            else:
                waiter.result = result
            waiter.answered = True
            waiter.wake.set()

    @staticmethod
    def _answer(waiter: _Waiter[Req, Res]) -> Res:
        if waiter.error is not None:
            raise waiter.error
        assert waiter.result is not None
        return waiter.result

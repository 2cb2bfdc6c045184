"""Blocking client calls (gRPC stubs, data-plane sockets) run in worker threads from the trio
FUSE tasks, each under a deadline.

gRPC has no trio support, so every call goes through `trio.to_thread.run_sync` with a
CapacityLimiter (control and data calls have separate limiters, so a stuck data transfer cannot
starve lookups). The deadline is enforced on the trio side: when it passes, the FUSE request is
answered ETIMEDOUT and the thread is abandoned. The thread's own socket/RPC timeouts (set below the
deadline by main.py) make it end soon after; until then it keeps its limiter token.

Resource handling: a caller that passes a buffer to an abandoned thread must not reuse it (the
thread may still write into it) - see `Offload.run` returning only when the thread is done or
raising Timeout.
"""
from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import trio

from curvine_py.core.errors import Timeout

log = logging.getLogger(__name__)

T = TypeVar("T")


class Offload:
    def __init__(self, *, deadline_s: float, control_threads: int = 16, data_threads: int = 16) -> None:
        self.deadline_s = deadline_s
        self.control = trio.CapacityLimiter(control_threads)
        self.data = trio.CapacityLimiter(data_threads)

    async def run(self, fn: Callable[..., T], *args: Any, data: bool = False,
                  deadline_s: float | None = None) -> T:
        """fn(*args) in a thread; raises Timeout (ETIMEDOUT) when the deadline passes first."""
        limit = self.deadline_s if deadline_s is None else deadline_s
        with trio.move_on_after(limit):
            return await trio.to_thread.run_sync(functools.partial(fn, *args),
                                                 limiter=self.data if data else self.control,
                                                 abandon_on_cancel=True)
        name = getattr(fn, "__qualname__", repr(fn))
        log.warning("%s did not finish within its deadline of %.1fs", name, limit)
        raise Timeout(f"{name}: no answer within {limit:.1f}s")

    async def control_call(self, fn: Callable[..., T], *args: Any) -> T:
        return await self.run(fn, *args)

    async def data_call(self, fn: Callable[..., T], *args: Any) -> T:
        return await self.run(fn, *args, data=True)

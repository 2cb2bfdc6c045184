"""Page-aligned buffers for FUSE read replies, reused without a copy.

A read handler returns a memoryview of a pooled buffer; pyfuse3 copies it into the kernel in
`fuse_reply_buf` right after the handler's coroutine returns, with no `await` in between. So a
buffer handed back with `defer()` just before `return` is safe to reuse by any *later* `acquire()`:
another task can only run after this one yields, i.e. after the reply was sent. A buffer that a
thread may still write into (the call was abandoned at its deadline) is never deferred: it is
simply dropped.
"""
from __future__ import annotations

from curvine_py.client.buffers import aligned

POOLED = 1 << 20


class ReplyBuffers:
    def __init__(self, keep: int = 32) -> None:
        self._free: list[memoryview] = []
        self._returned: list[memoryview] = []
        self._keep = keep

    def acquire(self, size: int) -> memoryview:
        if size > POOLED:
            return aligned(size)
        if self._returned:
            self._free.extend(self._returned[: max(0, self._keep - len(self._free))])
            self._returned.clear()
        return self._free.pop() if self._free else aligned(POOLED)

    def defer(self, buffer: memoryview) -> None:
        """Give `buffer` back once the current reply is sent (call right before returning)."""
        if len(buffer) == POOLED:
            self._returned.append(buffer)

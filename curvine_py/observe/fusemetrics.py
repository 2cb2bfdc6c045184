"""Counts the FUSE requests of a mount by op (`curvine_mount_requests_total{op}`, a latency
histogram per op, failures by errno name) by wrapping the handlers of one `pyfuse3.Operations`
instance, so the Operations code itself carries no metrics.

pyfuse3 calls each handler by attribute lookup on the instance it was given (`pyfuse3.init`), so
instance attributes set here take precedence over the class's methods. Call `instrument` before
`pyfuse3.init`.

What else the wrappers count, from the answers alone:
- `lookup` is the mount's way of asking "is this object there" (LMCache's `fs://` connector stats a
  chunk file): an entry is a hit (`curvine_cache_hits_total{way="mount"}`); ENOENT, or a negative
  entry (inode 0, cached by the kernel), is a miss and not an error;
- `getxattr` answering ENODATA (no such attribute) is an ordinary answer, not a failure: the kernel
  asks for `security.capability` before writes and tools probe for ACLs, so counting those in
  `curvine_errors_total{code="ENODATA"}` made noise for any alert on errors;
- `read` counts the bytes it returns (`curvine_sent_bytes_total{way="mount"}`), `write` the bytes it
  accepted (`curvine_received_bytes_total{way="mount"}`).
"""
from __future__ import annotations

import errno
import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any

from curvine_py.observe.metrics import MountMetrics
from curvine_py.observe.tally import KvTally

# The handlers of pyfuse3.Operations that the mount implements (fuse/operations.py).
FUSE_OPS = ("lookup", "forget", "getattr", "setattr", "readlink", "mknod", "mkdir", "symlink", "link",
            "unlink", "rmdir", "rename", "create", "open", "read", "write", "flush", "fsync", "release",
            "opendir", "readdir", "releasedir", "fsyncdir", "getxattr", "setxattr", "listxattr",
            "removexattr", "statfs", "access")

Handler = Callable[..., Awaitable[Any]]


def _is_miss(exc: BaseException) -> bool:
    return getattr(exc, "errno", None) == errno.ENOENT


def _no_attribute(exc: BaseException) -> bool:
    return getattr(exc, "errno", None) == errno.ENODATA


def _counted(op: str, handler: Handler, metrics: MountMetrics, tally: KvTally) -> Handler:
    # Every child resolved once, here, each a local child (observe/local.py), and the access
    # counts in the mount's tally (observe/tally.py): a `labels()` call per request, then
    # prometheus-client's own `inc` and `observe`, were most of what the wrapper cost a `stat`
    # (bench.fuse_calls). Counts are bumped on the attributes themselves, not through `inc()`:
    # one Python call fewer per request, on the one writer thread both allow.
    requests = metrics.requests.labels(op=op)
    latency = metrics.request_latency.labels(op=op)

    @functools.wraps(handler)
    async def counted(*args: Any, **kwargs: Any) -> Any:
        requests.value += 1
        start = time.perf_counter()
        try:
            result = await handler(*args, **kwargs)
        except BaseException as exc:
            if op == "lookup" and _is_miss(exc):
                tally.misses += 1
            elif not (op == "getxattr" and _no_attribute(exc)):
                metrics.errors.record(exc)
            raise
        finally:
            latency.observe(time.perf_counter() - start)
        if op == "lookup":
            if getattr(result, "st_ino", 0):
                tally.hits += 1
            else:
                tally.misses += 1
        elif op == "read":
            tally.sent += len(result)
        elif op == "write":
            tally.received += int(result)
        return result

    return counted


def instrument(operations: object, metrics: MountMetrics) -> int:
    """Wraps every handler of FUSE_OPS that `operations` has; returns how many were wrapped.
    Wrapping twice would count twice: a second call is an error."""
    if getattr(operations, "_curvine_instrumented", False):
        raise ValueError("these Operations are already instrumented")
    wrapped = 0
    tally = metrics.tallies.open()   # the trio thread's, for the mount's life
    for op in FUSE_OPS:
        handler = getattr(operations, op, None)
        if handler is not None:
            setattr(operations, op, _counted(op, handler, metrics, tally))
            wrapped += 1
    operations._curvine_instrumented = True  # type: ignore[attr-defined]
    return wrapped

"""The one error boundary of the mount: every FUSE handler is wrapped by `boundary`, and only
`pyfuse3.FUSEError(errno)` leaves it.

Why: pyfuse3 dies on any other exception, and a dead mount process leaves the mountpoint answering
"Transport endpoint is not connected" until someone unmounts it. So a CurvineError becomes its
errno through one table (`fuse_errno`), and an unexpected exception is logged with its traceback and
answered EIO. Tests set CURVINE_FUSE_FAIL_FAST=1: the exception then propagates and ends the mount,
so bugs surface instead of being turned into EIO.
"""
from __future__ import annotations

import errno as E
import functools
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pyfuse3

from curvine_py.core.errors import CurvineError, StaleEpoch

log = logging.getLogger(__name__)
trace = logging.getLogger("curvine_py.fuse.trace")   # one line per request with its duration (debug)

FAIL_FAST_ENV = "CURVINE_FUSE_FAIL_FAST"

# Errnos that mean something to the cluster but not to a program using files: a worker or the
# master out of reach is an I/O error for the application (as NFS soft mounts answer); a timeout
# keeps its own errno so it can be told apart.
_FUSE_ERRNO: dict[int, int] = {
    E.EHOSTUNREACH: E.EIO,
    E.ECONNREFUSED: E.EIO,
    E.ECONNRESET: E.EIO,
    E.ENOTCONN: E.EIO,        # a program would read it as "the mount is dead"; it is a peer's socket
    E.ENETUNREACH: E.EIO,
    E.EPIPE: E.EIO,
    E.EPROTO: E.EIO,
}

# Errnos that are ordinary answers (ENOENT from a lookup...) are logged at debug level only.
_QUIET = {E.ENOENT, E.EEXIST, E.ENOTEMPTY, E.ENOTDIR, E.EISDIR, E.ENODATA, E.EACCES, E.EPERM,
          E.EINVAL, E.ENAMETOOLONG, E.ERANGE, E.E2BIG, E.EOPNOTSUPP, E.EILSEQ, E.EXDEV, E.EROFS,
          E.ESTALE}

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


def fuse_errno(code: int) -> int:
    """The errno a FUSE reply carries for a CurvineError's errno."""
    return _FUSE_ERRNO.get(code, code) or E.EIO


def fail_fast() -> bool:
    return os.environ.get(FAIL_FAST_ENV, "") not in ("", "0")


def boundary(func: F) -> F:
    """Wraps one pyfuse3 handler: CurvineError/OSError -> FUSEError(errno), anything else -> EIO
    (or re-raised under CURVINE_FUSE_FAIL_FAST). Cancellation and FUSEError pass through."""
    name = func.__name__

    @functools.wraps(func)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await func(*args, **kwargs)
        except pyfuse3.FUSEError:
            raise
        except CurvineError as exc:
            # A membership epoch that could not be refreshed is the cluster's business (EIO);
            # ESTALE to the kernel means "this inode is gone" (filesystem.StaleHandle).
            code = E.EIO if isinstance(exc, StaleEpoch) else fuse_errno(exc.errno)
            if code in _QUIET:
                log.debug("%s: %s (%s)", name, exc, E.errorcode.get(code, code))
            else:
                log.warning("%s failed: %s (%s)", name, exc, E.errorcode.get(code, code))
            raise pyfuse3.FUSEError(code) from None
        except OSError as exc:
            code = exc.errno or E.EIO
            log.warning("%s failed: %s", name, exc)
            raise pyfuse3.FUSEError(fuse_errno(code)) from None
        except Exception:
            log.exception("unexpected error in %s: answered EIO", name)
            if fail_fast():
                raise
            raise pyfuse3.FUSEError(E.EIO) from None
        finally:
            if trace.isEnabledFor(logging.DEBUG):
                trace.debug("%s %.0f us", name, (time.perf_counter() - started) * 1e6)

    return wrapper  # type: ignore[return-value]

"""CurvineError <-> gRPC status, with the one errno table of core/errors.py.

The server aborts with the status code of the table and the errno name in trailing metadata
`curvine-errno`; the client rebuilds the exact `CurvineError` subclass from it. Transport failures
(UNAVAILABLE, DEADLINE_EXCEEDED without our metadata) become `Unavailable` / `Timeout`; a master
that refused the connection is ECONNREFUSED, not EHOSTUNREACH, so the message says what happened.
"""
from __future__ import annotations

import errno as E
import functools
import logging
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import grpc

from curvine_py.core import errors
from curvine_py.core.errors import CurvineError

log = logging.getLogger(__name__)

ERRNO_METADATA = "curvine-errno"

_ERRNO_BY_STATUS: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.UNAVAILABLE: E.EHOSTUNREACH,
    grpc.StatusCode.DEADLINE_EXCEEDED: E.ETIMEDOUT,
    grpc.StatusCode.CANCELLED: E.EINTR,
    grpc.StatusCode.UNAUTHENTICATED: E.EACCES,
    grpc.StatusCode.PERMISSION_DENIED: E.EACCES,
    grpc.StatusCode.NOT_FOUND: E.ENOENT,
    grpc.StatusCode.ALREADY_EXISTS: E.EEXIST,
    grpc.StatusCode.INVALID_ARGUMENT: E.EINVAL,
    grpc.StatusCode.RESOURCE_EXHAUSTED: E.ENOSPC,
    grpc.StatusCode.UNIMPLEMENTED: E.EOPNOTSUPP,
}


# grpc's words (C core) when the TCP connect was refused: nothing listens at the address. Not
# "failed to connect" alone: grpc says that for no route to host and DNS failures too.
_REFUSED_MARKERS = ("connection refused",)


def status_for(exc: CurvineError) -> grpc.StatusCode:
    return grpc.StatusCode[errors.status_name(exc.errno)]


def _transport_errno(code: grpc.StatusCode, details: str) -> int:
    if code is grpc.StatusCode.UNAVAILABLE and any(m in details.lower() for m in _REFUSED_MARKERS):
        return E.ECONNREFUSED
    return _ERRNO_BY_STATUS.get(code, E.EIO)


def from_rpc_error(exc: grpc.RpcError) -> CurvineError:
    """Client side: the CurvineError a failed call stands for."""
    code: grpc.StatusCode = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
    details = exc.details() if hasattr(exc, "details") else str(exc)
    trailing = exc.trailing_metadata() if hasattr(exc, "trailing_metadata") else None
    for item in trailing or ():
        if item.key == ERRNO_METADATA:
            value = item.value.decode() if isinstance(item.value, bytes) else str(item.value)
            return errors.from_errno(errors.errno_from_name(value), details or "")
    return errors.from_errno(_transport_errno(code, details or ""), f"{code.name}: {details}")


F = TypeVar("F", bound=Callable[..., Any])


def abort_with(context: grpc.ServicerContext, exc: CurvineError) -> NoReturn:
    context.set_trailing_metadata(((ERRNO_METADATA, errors.errno_name(exc.errno)),))
    context.abort(status_for(exc), exc.message)
    raise AssertionError("unreachable")  # context.abort raises


def grpc_method(func: F) -> F:
    """Decorates a servicer method of a (synchronous) grpc.server: CurvineError -> its status;
    anything else is logged and answered INTERNAL (the server keeps serving)."""

    @functools.wraps(func)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return func(self, request, context)
        except CurvineError as exc:
            abort_with(context, exc)
        except Exception as exc:   # handlers never abort themselves: this is a bug, not a status
            log.exception("internal error in %s", func.__name__)
            abort_with(context, CurvineError(f"internal error: {exc}"))

    return wrapper  # type: ignore[return-value]


"""The CSI boundary: CurvineError -> gRPC status code (one table), and the decorator every CSI
handler wears, so a handler raises and never sets codes by hand.

`CsiError` carries a status code chosen by the handler itself (validation, spec-mandated codes);
a `CurvineError` from the client is mapped by errno; anything else is a bug: INTERNAL, logged
with its traceback.
"""
from __future__ import annotations

import errno as E
import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

from curvine_py.core.errors import CurvineError

log = logging.getLogger(__name__)


class CsiError(Exception):
    """A request answered with a specific CSI status code."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def invalid(message: str) -> CsiError:
    return CsiError(grpc.StatusCode.INVALID_ARGUMENT, message)


def not_found(message: str) -> CsiError:
    return CsiError(grpc.StatusCode.NOT_FOUND, message)


def already_exists(message: str) -> CsiError:
    return CsiError(grpc.StatusCode.ALREADY_EXISTS, message)


def precondition(message: str) -> CsiError:
    return CsiError(grpc.StatusCode.FAILED_PRECONDITION, message)


def internal(message: str) -> CsiError:
    return CsiError(grpc.StatusCode.INTERNAL, message)


# errno of a CurvineError from the cluster -> the CSI status a CO acts on.
_STATUS_BY_ERRNO: dict[int, grpc.StatusCode] = {
    E.ENOENT: grpc.StatusCode.NOT_FOUND,
    E.EEXIST: grpc.StatusCode.ALREADY_EXISTS,
    E.EINVAL: grpc.StatusCode.INVALID_ARGUMENT,
    E.ENAMETOOLONG: grpc.StatusCode.INVALID_ARGUMENT,
    E.ENOTDIR: grpc.StatusCode.FAILED_PRECONDITION,
    E.ENOTEMPTY: grpc.StatusCode.FAILED_PRECONDITION,
    E.EACCES: grpc.StatusCode.PERMISSION_DENIED,
    E.EPERM: grpc.StatusCode.PERMISSION_DENIED,
    E.ENOSPC: grpc.StatusCode.RESOURCE_EXHAUSTED,
    E.EDQUOT: grpc.StatusCode.RESOURCE_EXHAUSTED,
    E.EFBIG: grpc.StatusCode.OUT_OF_RANGE,
    E.EHOSTUNREACH: grpc.StatusCode.UNAVAILABLE,
    E.ETIMEDOUT: grpc.StatusCode.DEADLINE_EXCEEDED,
    E.EOPNOTSUPP: grpc.StatusCode.UNIMPLEMENTED,
    E.EBUSY: grpc.StatusCode.FAILED_PRECONDITION,
    E.ENOTCONN: grpc.StatusCode.UNAVAILABLE,
}


def status_for(exc: CurvineError) -> grpc.StatusCode:
    return _STATUS_BY_ERRNO.get(exc.errno, grpc.StatusCode.INTERNAL)


F = TypeVar("F", bound=Callable[..., Any])


def csi_method(func: F) -> F:
    """Wraps a servicer method `(self, request, context)`: errors become the status of the table."""

    @functools.wraps(func)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return func(self, request, context)
        except CsiError as exc:
            context.abort(exc.code, exc.message)
        except CurvineError as exc:
            context.abort(status_for(exc), exc.message)
        except Exception as exc:   # a bug: never let it look like a valid answer
            log.exception("%s failed", func.__name__)
            context.abort(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")

    return wrapper  # type: ignore[return-value]

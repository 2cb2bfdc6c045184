"""The CSI boundary: CurvineError -> gRPC status code (the one table of core/errors.py), and the
decorator every CSI handler wears, so a handler raises and never sets codes by hand.

`CsiError` carries a status code chosen by the handler itself (validation, spec-mandated codes);
a `CurvineError` from the client is mapped by errno; anything else is a bug: INTERNAL, logged
with its traceback.
"""
from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

from curvine_py.core.errors import CurvineError, status_name

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


def status_for(exc: CurvineError) -> grpc.StatusCode:
    """The status a CO acts on for a CurvineError from the cluster: the one errno table
    (core/errors.py), shared with the master's replies. No CSI override is needed: the codes the
    spec mandates per RPC (e.g. NOT_FOUND for an unknown volume id) are raised as CsiError by the
    handlers, and the table's codes already match the spec's general meanings (EBUSY is
    FAILED_PRECONDITION as "Volume in use", unreachable peers UNAVAILABLE so the CO retries)."""
    return grpc.StatusCode[status_name(exc.errno)]


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

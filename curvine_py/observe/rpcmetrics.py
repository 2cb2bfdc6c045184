"""A gRPC server interceptor (synchronous `grpc.server`) that counts every unary RPC by method and
status and observes its duration into `MasterMetrics`.

The method label is the last part of the full method name ('/curvine.v1.Master/Lookup' ->
'Lookup'), from the service's own method table: a call of a method the server does not have is
counted as 'unknown', so a peer cannot add label values. The status is read from the servicer
context after the handler ran: handlers abort with a status (rpc/errors.py `grpc_method`), and a
handler that returns normally is 'OK' unless it set a code itself.

Put it first in the interceptor list so that calls refused by a later interceptor (a missing token:
UNAUTHENTICATED) are counted too.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import grpc

from curvine_py.observe.metrics import MasterMetrics

UNKNOWN_METHOD = "unknown"


def method_label(full_method: str) -> str:
    name = full_method.rsplit("/", 1)[-1]
    return name if name and name.isidentifier() and len(name) <= 48 else UNKNOWN_METHOD


def _status_name(context: grpc.ServicerContext, failed: bool) -> str:
    code = context.code() if hasattr(context, "code") else None
    if isinstance(code, grpc.StatusCode):
        return str(code.name)
    # No code set: a normal return is OK; an exception that was not an abort is gRPC's UNKNOWN.
    return "UNKNOWN" if failed else "OK"


class RpcMetricsInterceptor(grpc.ServerInterceptor):
    def __init__(self, metrics: MasterMetrics) -> None:
        self._metrics = metrics

    def intercept_service(self, continuation: Callable[[Any], Any],
                          handler_call_details: grpc.HandlerCallDetails) -> Any:
        handler = continuation(handler_call_details)
        if handler is None:
            # gRPC answers UNIMPLEMENTED itself; count it without taking the peer's method name.
            self._metrics.rpc(UNKNOWN_METHOD, grpc.StatusCode.UNIMPLEMENTED.name, 0.0)
            return None
        if handler.unary_unary is None:
            return handler   # the master has unary methods only; streams pass through uncounted
        method = method_label(handler_call_details.method)
        behavior = handler.unary_unary
        metrics = self._metrics

        def counted(request: Any, context: grpc.ServicerContext) -> Any:
            start = time.perf_counter()
            failed = True
            try:
                reply = behavior(request, context)
                failed = False
                return reply
            finally:
                metrics.rpc(method, _status_name(context, failed), time.perf_counter() - start)

        return grpc.unary_unary_rpc_method_handler(
            counted, request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer)

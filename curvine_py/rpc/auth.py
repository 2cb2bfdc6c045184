"""Shared-secret token authentication for gRPC (metadata `authorization: Bearer <token>`).

A server with a token refuses calls without it (UNAUTHENTICATED); the data plane checks the same
token in its HELLO frame. Comparison is constant-time.
"""
from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Any

import grpc

TOKEN_METADATA = "authorization"
# Which client session a call comes from (directory leases: master/leases.py). Not a credential.
SESSION_METADATA = "curvine-session"


def bearer(token: str) -> str:
    return f"Bearer {token}"


def token_matches(expected: str | None, presented: str | bytes | None) -> bool:
    if not expected:
        return True
    if presented is None:
        return False
    return hmac.compare_digest(expected.encode(), presented if isinstance(presented, bytes) else presented.encode())


class TokenInterceptor(grpc.ServerInterceptor):
    def __init__(self, token: str | None) -> None:
        self._token = token

        def deny(request: Any, context: grpc.ServicerContext) -> Any:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong token")

        self._deny: grpc.RpcMethodHandler[Any, Any] = grpc.unary_unary_rpc_method_handler(deny)

    def intercept_service(self, continuation: Callable[[Any], Any],
                          handler_call_details: grpc.HandlerCallDetails) -> Any:
        if not self._token:
            return continuation(handler_call_details)
        presented = dict(handler_call_details.invocation_metadata or ()).get(TOKEN_METADATA)
        if token_matches(bearer(self._token), presented):
            return continuation(handler_call_details)
        return self._deny


def call_metadata(token: str | None, session: str = "") -> tuple[tuple[str, str], ...]:
    metadata = ((TOKEN_METADATA, bearer(token)),) if token else ()
    return (*metadata, (SESSION_METADATA, session)) if session else metadata


def session_of(context: grpc.ServicerContext) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == SESSION_METADATA:
            return str(value)
    return ""

"""The plugin's gRPC server on a unix socket, and the interceptor that logs every call.

Endpoint handling: `unix:///path/csi.sock` (or a bare path); a stale socket file left by a dead
plugin is removed at start (a live plugin on it is refused, not displaced); the socket is made
mode 0600 before the server accepts anything (the kubelet and sidecars run as root).

Logging: each call is logged with its request and its status; fields the spec marks `csi_secret`
are replaced before the text is built, so secrets never reach a log line. Probe (called every few
seconds by the liveness sidecar) logs at debug.
"""
from __future__ import annotations

import errno
import logging
import os
import socket
import stat
import time
from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc
from google.protobuf import text_format
from google.protobuf.message import Message

from curvine_py.core.errors import InvalidArgument, NotPermitted
from curvine_py.proto.csi.v1 import csi_pb2 as csi

log = logging.getLogger(__name__)

REDACTED = "***stripped***"
QUIET_METHODS = {"Probe"}


def socket_path(endpoint: str) -> str:
    """`unix:///abs/path` or `unix://abs/path` or `/abs/path` -> the socket's file path."""
    if endpoint.startswith("unix://"):
        path = endpoint[len("unix://"):]
        path = path if path.startswith("/") else "/" + path
    elif endpoint.startswith("/"):
        path = endpoint
    else:
        raise InvalidArgument(f"--endpoint {endpoint!r}: expected unix:///path/to/csi.sock")
    return os.path.normpath(path)


def remove_stale_socket(path: str) -> None:
    """Removes a socket file nobody listens on; refuses to touch anything else."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise NotPermitted(f"{path} exists and is not a socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except OSError as exc:
        if exc.errno not in (errno.ECONNREFUSED, errno.ENOENT):
            raise
        os.unlink(path)
        log.info("removed the stale socket %s", path)
        return
    finally:
        probe.close()
    raise NotPermitted(f"another process serves {path}")


def sanitize(message: Message) -> str:
    """One-line text of `message` with every csi_secret field's values replaced."""
    clean = type(message)()
    clean.CopyFrom(message)
    _redact(clean)
    return text_format.MessageToString(clean, as_one_line=True)


def _redact(message: Message) -> None:
    for field, value in message.ListFields():
        if field.GetOptions().Extensions[csi.csi_secret]:  # type: ignore[index]
            if field.message_type is not None and field.message_type.GetOptions().map_entry:
                for key in list(value):
                    value[key] = REDACTED
            elif field.type == field.TYPE_STRING:
                setattr(message, field.name, REDACTED)
            else:
                message.ClearField(field.name)
        elif field.type == field.TYPE_MESSAGE:
            if field.message_type.GetOptions().map_entry:
                continue
            if field.is_repeated:
                for item in value:
                    _redact(item)
            else:
                _redact(value)


class LoggingInterceptor(grpc.ServerInterceptor):
    def intercept_service(self, continuation: Callable[[Any], Any],
                          handler_call_details: grpc.HandlerCallDetails) -> Any:
        handler = continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        method = handler_call_details.method.rsplit("/", 1)[-1]
        level = logging.DEBUG if method in QUIET_METHODS else logging.INFO
        inner = handler.unary_unary

        def logged(request: Message, context: grpc.ServicerContext) -> Any:
            started = time.monotonic()
            if log.isEnabledFor(level):
                log.log(level, "%s request: %s", method, sanitize(request))
            try:
                response = inner(request, context)
            except Exception:
                # code()/details() exist on the server's context (grpc >= 1.38), not in the stubs
                code = getattr(context, "code", lambda: None)()
                details = getattr(context, "details", lambda: b"")() or b""
                log.info("%s failed: %s %s (%.0f ms)", method, getattr(code, "name", "UNKNOWN"),
                         details.decode(errors="replace") if isinstance(details, bytes) else details,
                         (time.monotonic() - started) * 1000)
                raise
            if log.isEnabledFor(level):
                log.log(level, "%s response: %s (%.0f ms)", method, sanitize(response),
                        (time.monotonic() - started) * 1000)
            return response

        return grpc.unary_unary_rpc_method_handler(logged, request_deserializer=handler.request_deserializer,
                                                   response_serializer=handler.response_serializer)


def serve(endpoint: str, register: Callable[[grpc.Server], None], *, workers: int = 8) -> tuple[grpc.Server, str]:
    """Starts the server on the endpoint's socket; returns it and the socket path."""
    path = socket_path(endpoint)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    remove_stale_socket(path)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="csi"),
                         interceptors=[LoggingInterceptor()])
    register(server)
    # bind under a umask that leaves the socket 0600 from its first moment (chmod after would race)
    previous = os.umask(0o177)
    try:
        if server.add_insecure_port(f"unix://{path}") == 0:
            raise NotPermitted(f"cannot listen on {path}")
    finally:
        os.umask(previous)
    server.start()
    os.chmod(path, 0o600)
    return server, path

"""The one errno -> gRPC status table (core/errors.py), as the master's and the CSI driver's replies
use it, and how a client names a master it cannot reach."""
from __future__ import annotations

import errno
import os
import socket
import subprocess
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from curvine_py.core import errors
from curvine_py.core.errors import CurvineError, Unavailable
from curvine_py.csi import errors as csi_errors
from curvine_py.procs import curvine_command
from curvine_py.rpc import errors as rpc_errors

# The union of the two tables rpc/ and csi/ held before they became one: every code a client, the
# CSI sanity suite or a CO relied on stays what it was.
EXPECTED = {
    errno.ENOENT: "NOT_FOUND", errno.ENODATA: "NOT_FOUND", errno.EEXIST: "ALREADY_EXISTS",
    errno.ENOTEMPTY: "FAILED_PRECONDITION", errno.ENOTDIR: "FAILED_PRECONDITION",
    errno.EISDIR: "FAILED_PRECONDITION", errno.ESTALE: "FAILED_PRECONDITION",
    errno.ELOOP: "FAILED_PRECONDITION", errno.EBUSY: "FAILED_PRECONDITION",
    errno.EACCES: "PERMISSION_DENIED", errno.EPERM: "PERMISSION_DENIED",
    errno.EINVAL: "INVALID_ARGUMENT", errno.E2BIG: "INVALID_ARGUMENT", errno.ENAMETOOLONG: "INVALID_ARGUMENT",
    errno.ERANGE: "OUT_OF_RANGE", errno.EFBIG: "OUT_OF_RANGE",
    errno.ENOSPC: "RESOURCE_EXHAUSTED", errno.EDQUOT: "RESOURCE_EXHAUSTED",
    errno.EHOSTUNREACH: "UNAVAILABLE", errno.ENOTCONN: "UNAVAILABLE", errno.ECONNREFUSED: "UNAVAILABLE",
    errno.ETIMEDOUT: "DEADLINE_EXCEEDED", errno.EOPNOTSUPP: "UNIMPLEMENTED", errno.EIO: "INTERNAL",
}


def test_the_table_keeps_every_code_of_both_old_tables() -> None:
    assert errors.STATUS_BY_ERRNO == EXPECTED


@pytest.mark.parametrize("code", sorted(errors.STATUS_BY_ERRNO))
def test_rpc_and_csi_answer_every_entry_with_the_same_status(code: int) -> None:
    exc = errors.from_errno(code, "x")
    want = grpc.StatusCode[errors.STATUS_BY_ERRNO[code]]
    assert rpc_errors.status_for(exc) is want
    assert csi_errors.status_for(exc) is want


@pytest.mark.parametrize("code", [errno.EPROTO, errno.EINTR, errno.EXDEV])
def test_an_errno_outside_the_table_gets_the_one_fallback_on_both(code: int) -> None:
    exc = CurvineError("x", errno=code)
    assert errors.status_name(code) == errors.FALLBACK_STATUS == "UNKNOWN"
    assert rpc_errors.status_for(exc) is csi_errors.status_for(exc) is grpc.StatusCode.UNKNOWN


def test_every_status_name_is_a_grpc_code() -> None:
    names = {c.name for c in grpc.StatusCode}
    assert set(errors.STATUS_BY_ERRNO.values()) | {errors.FALLBACK_STATUS} <= names


@pytest.mark.parametrize("code", [errno.ECONNREFUSED, errno.ECONNRESET, errno.ENOTCONN, errno.EHOSTUNREACH])
def test_a_peer_that_cannot_be_reached_is_unavailable_with_its_errno(code: int) -> None:
    error = errors.from_errno(code, "peer")
    assert isinstance(error, Unavailable) and error.errno == code


class _Raiser:
    """A servicer whose one method raises the CurvineError named by the request (errno as text)."""

    @rpc_errors.grpc_method
    def Raise(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        raise errors.from_errno(int(request), f"raised {int(request)}")


@pytest.fixture(scope="module")
def raiser() -> Iterator[grpc.Channel]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = _Raiser()
    handler = grpc.unary_unary_rpc_method_handler(lambda req, ctx: servicer.Raise(req, ctx))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("t.Errors", {"Raise": handler}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield channel
    finally:
        channel.close()
        server.stop(None)


@pytest.mark.parametrize("code", sorted(errors.STATUS_BY_ERRNO) + [errno.EPROTO])
def test_a_real_server_answers_the_table_status_and_the_client_gets_the_errno_back(
        raiser: grpc.Channel, code: int) -> None:
    call: Any = raiser.unary_unary("/t.Errors/Raise")
    with pytest.raises(grpc.RpcError) as info:
        call(str(code).encode(), timeout=10)
    assert info.value.code() is grpc.StatusCode[errors.status_name(code)]
    back = rpc_errors.from_rpc_error(info.value)
    assert back.errno == code and back.message == f"raised {code}"


def _free_port() -> int:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port: int = probe.getsockname()[1]
    probe.close()                               # nothing listens there now
    return port


def test_a_refused_connection_to_the_master_is_econnrefused_not_ehostunreach() -> None:
    channel = grpc.insecure_channel(f"127.0.0.1:{_free_port()}")
    try:
        with pytest.raises(grpc.RpcError) as info:
            channel.unary_unary("/t.Errors/Raise")(b"0", timeout=10)
    finally:
        channel.close()
    error = rpc_errors.from_rpc_error(info.value)
    assert isinstance(error, Unavailable) and error.errno == errno.ECONNREFUSED


def test_an_unavailable_that_is_not_a_refusal_stays_ehostunreach() -> None:
    class Lost(grpc.RpcError):
        def code(self) -> grpc.StatusCode:
            return grpc.StatusCode.UNAVAILABLE

        def details(self) -> str:
            return "Socket closed"

        def trailing_metadata(self) -> tuple[()]:
            return ()

    error = rpc_errors.from_rpc_error(Lost())
    assert isinstance(error, Unavailable) and error.errno == errno.EHOSTUNREACH


def test_the_cli_against_a_port_where_nothing_listens_says_connection_refused() -> None:
    done = subprocess.run(curvine_command("fs", "--master", f"127.0.0.1:{_free_port()}", "--timeout", "5", "ls", "/"),
                          check=False, capture_output=True, text=True, timeout=60, env=dict(os.environ))
    assert done.returncode == 1, done.stderr
    assert "Connection refused" in done.stderr and "(ECONNREFUSED)" in done.stderr, done.stderr
    assert "EHOSTUNREACH" not in done.stderr, done.stderr

"""Bounded resources on the worker's data plane, on real sockets in-process: connection caps in all
and per peer (a refused client gets an EAGAIN error frame at once, open connections keep being
served), idle, header and authentication timeouts, the fd-limit sizing and the refuser's bounds."""
from __future__ import annotations

import errno
import os
import pathlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from curvine_py.core import frames
from curvine_py.core.errors import Busy, InvalidArgument, Unavailable
from curvine_py.proto.curvine.v1.data_pb2 import DataHeader
from curvine_py.worker.limits import ConnectionGate, ServerLimits
from curvine_py.worker.refuser import Refuser
from curvine_py.worker.server import DataServer, WorkerState
from curvine_py.worker.shortcircuit import ShortCircuitServer
from curvine_py.worker.store import Store
from tests.unit.test_worker_server import WireClient, assert_closed

Op = frames.Op


@pytest.fixture
def store(tmp_path: pathlib.Path) -> Iterator[Store]:
    with Store([(str(tmp_path / "d"), 0)]) as s:
        yield s


def serve(store: Store, limits: ServerLimits, *, token: str = "",
          refuser: Refuser | None = None) -> tuple[DataServer, ConnectionGate, tuple[str, int]]:
    gate = ConnectionGate(limits.resolved(1024))
    server = DataServer(store, WorkerState("w1"), host="127.0.0.1", port=0, token=token, max_payload=1 << 20,
                        limits=limits, gate=gate, refuser=refuser)
    return server, gate, server.start()


@pytest.fixture
def refuser() -> Iterator[Refuser]:
    r = Refuser(deadline_s=2.0)
    r.start()
    yield r
    r.stop()


def test_limits_are_sized_from_the_fd_limit_and_validated() -> None:
    auto = ServerLimits().resolved(1024)
    assert (auto.max_connections, auto.max_per_peer) == (448, 224)
    assert ServerLimits(max_connections=10).resolved(1024).max_per_peer == 5
    assert ServerLimits(max_connections=10, max_per_peer=50).resolved(64).max_per_peer == 10
    assert ServerLimits().resolved(100).max_connections == 8           # never below the minimum
    assert ServerLimits().resolved(1 << 20).max_connections == 16384   # nor above a thread budget
    for bad in ({"max_connections": -1}, {"idle_timeout_s": -1.0}, {"header_timeout_s": -0.5}):
        with pytest.raises(InvalidArgument):
            ServerLimits(**bad)   # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        ConnectionGate(ServerLimits())                                  # unresolved: refused


def test_the_fd_limit_is_raised_to_the_hard_limit() -> None:
    code = "from curvine_py.worker.limits import raise_fd_limit; import resource; " \
           "print(raise_fd_limit(), resource.getrlimit(resource.RLIMIT_NOFILE)[0])"
    out = subprocess.run(["prlimit", "--nofile=100:300", sys.executable, "-c", code], capture_output=True,
                         text=True, check=True, env={**os.environ}).stdout.split()
    assert out == ["300", "300"]


def test_gate_counts_in_all_and_per_peer() -> None:
    gate = ConnectionGate(ServerLimits(max_connections=3, max_per_peer=2).resolved(0))
    assert gate.admit("a") is None and gate.admit("a") is None
    refusal = gate.admit("a")
    assert isinstance(refusal, Busy) and "per peer is 2" in refusal.message and refusal.errno == errno.EAGAIN
    assert gate.admit("b") is None
    refusal = gate.admit("c")
    assert isinstance(refusal, Busy) and "3 connections open, the limit is 3" in refusal.message
    gate.release("a")
    assert gate.admit("c") is None and gate.open == 3


def test_over_the_cap_new_clients_are_refused_at_once_and_open_ones_keep_working(
        store: Store, refuser: Refuser) -> None:
    server, gate, address = serve(store, ServerLimits(max_connections=3, max_per_peer=3), refuser=refuser)
    try:
        held = [WireClient(address) for _ in range(3)]
        held[0].put("k", b"v" * 1000)
        started = time.monotonic()
        late = WireClient(address, hello=False)
        with pytest.raises(Busy, match="3 connections open, the limit is 3"):
            late.call(Op.HELLO, DataHeader())
        assert time.monotonic() - started < 2.0                        # an answer, not a timeout
        assert_closed(late.sock)
        for client in held:                                            # the open ones are served
            reply, data = client.get("k")
            assert reply.found and data == b"v" * 1000
        held.pop().close()
        deadline = time.monotonic() + 5
        while gate.open > 2:                                           # the server saw the close
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with WireClient(address) as again:                             # room again: admitted
            assert again.call(Op.PING, DataHeader()).errno == 0
        assert refuser.answered == 1
        for client in held:
            client.close()
    finally:
        server.stop()


def test_a_refused_client_of_the_library_fails_over_as_for_an_unreachable_worker(
        store: Store, refuser: Refuser) -> None:
    from curvine_py.client.dataconn import WorkerConnection
    server, _, (host, port) = serve(store, ServerLimits(max_connections=1, max_per_peer=1), refuser=refuser)
    try:
        first = WorkerConnection(host, port, token="", timeout_s=10, max_payload=1 << 20)
        with pytest.raises(Unavailable) as refused:                    # Busy is an Unavailable
            WorkerConnection(host, port, token="", timeout_s=10, max_payload=1 << 20)
        assert isinstance(refused.value, Busy)
        assert first.request(Op.PING, DataHeader()).header.errno == 0
        first.close()
    finally:
        server.stop()


def test_a_half_sent_header_is_timed_out_and_others_are_served(store: Store) -> None:
    server, _, address = serve(store, ServerLimits(header_timeout_s=0.3))
    try:
        with WireClient(address) as good, socket.create_connection(address) as stuck:
            prefix = frames.encode(Op.PING, 1, DataHeader(message="x" * 50))
            stuck.sendall(prefix[:frames.PREFIX_SIZE + 10])           # the prefix and part of the header
            assert good.call(Op.PING, DataHeader()).errno == 0
            started = time.monotonic()
            assert_closed(stuck)                                       # closed, without a reply
            assert time.monotonic() - started < 4
            assert good.call(Op.PING, DataHeader()).errno == 0
    finally:
        server.stop()


def test_a_header_trickled_byte_by_byte_is_timed_out_despite_progress(store: Store) -> None:
    server, _, address = serve(store, ServerLimits(idle_timeout_s=60, header_timeout_s=0.5))
    try:
        with socket.create_connection(address) as slow:
            frame = frames.encode(Op.PING, 1, DataHeader(message="y" * 100))
            deadline = time.monotonic() + 5
            closed = False
            for byte in frame:                                        # one byte per 50 ms: 7 s in all
                try:
                    slow.sendall(bytes([byte]))
                except (BrokenPipeError, ConnectionResetError):
                    closed = True
                    break
                slow.settimeout(0.05)
                try:
                    if slow.recv(1) == b"":
                        closed = True
                        break
                except TimeoutError:
                    pass
                assert time.monotonic() < deadline
            assert closed
    finally:
        server.stop()


def test_an_idle_connection_is_closed_and_a_busy_one_is_not(store: Store) -> None:
    server, gate, address = serve(store, ServerLimits(idle_timeout_s=0.4))
    try:
        with WireClient(address) as idle, WireClient(address) as busy:
            started = time.monotonic()
            while time.monotonic() - started < 1.0:                   # requests every 100 ms: kept
                assert busy.call(Op.PING, DataHeader()).errno == 0
                time.sleep(0.1)
            assert_closed(idle.sock)
            assert busy.call(Op.PING, DataHeader()).errno == 0
        deadline = time.monotonic() + 5
        while gate.open:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        server.stop()


def test_without_hello_in_time_a_token_connection_is_closed(store: Store) -> None:
    server, _, address = serve(store, ServerLimits(idle_timeout_s=300, auth_timeout_s=0.3), token="secret")
    try:
        with socket.create_connection(address) as silent, WireClient(address, token="secret") as good:
            assert_closed(silent)                                     # long before the idle timeout
            assert good.call(Op.PING, DataHeader()).errno == 0
    finally:
        server.stop()


def test_short_circuit_connections_count_against_the_same_gate(store: Store, refuser: Refuser,
                                                              tmp_path: pathlib.Path) -> None:
    limits = ServerLimits(max_connections=2, max_per_peer=2)
    server, gate, address = serve(store, limits, refuser=refuser)
    sc = ShortCircuitServer(store, WorkerState("w1"), path=str(tmp_path / "w.sock"), token="", max_payload=1 << 20,
                            limits=limits, gate=gate, refuser=refuser)
    path = sc.start()
    try:
        with WireClient(address), WireClient(path) as local:
            assert local.call(Op.PING, DataHeader()).errno == 0
            with pytest.raises(Busy):
                WireClient(path)
            with pytest.raises(Busy):
                WireClient(address)
    finally:
        sc.stop()
        server.stop()


def test_the_refuser_holds_a_bounded_number_of_sockets_for_a_bounded_time() -> None:
    refuser = Refuser(deadline_s=0.2, max_pending=2)
    refuser.start()
    pairs = [socket.socketpair() for _ in range(3)]
    try:
        pairs[1][1].sendall(b"not our protocol at all.")
        started = time.monotonic()
        for ours, _ in pairs:
            refuser.refuse(ours, Busy("full"))
        assert_closed(pairs[0][1])                                    # over max_pending: the oldest goes
        assert_closed(pairs[1][1])                                    # garbage: closed unanswered
        assert_closed(pairs[2][1])                                    # silent: closed at the deadline
        assert 0.15 < time.monotonic() - started < 4 and refuser.answered == 0
    finally:
        refuser.stop()
        for a, b in pairs:
            a.close()
            b.close()

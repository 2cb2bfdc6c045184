"""Client failover rules without a cluster: suspects (fake clock), which error replies mean
"overloaded", how a refused connect is reported, and the deadline of a call to a worker that
accepts but never answers (real sockets on loopback)."""
from __future__ import annotations

import errno
import socket
import time

import pytest

from curvine_py.client.dataconn import WorkerConnection
from curvine_py.client.suspects import Suspects
from curvine_py.core.errors import Busy, InvalidArgument, NoSpace, Timeout, Unavailable, from_errno


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_suspects_go_last_until_their_hold_ends_or_they_answer() -> None:
    clock = FakeClock()
    suspects = Suspects(hold_s=5.0, clock=clock)
    workers = ["a", "b", "c"]
    assert suspects.order(workers, str) == ["a", "b", "c"]
    suspects.mark("a")
    assert suspects.order(workers, str) == ["b", "c", "a"]      # still tried, last
    clock.now += 4.9
    assert suspects.order(workers, str) == ["b", "c", "a"]
    clock.now += 0.2
    assert suspects.order(workers, str) == ["a", "b", "c"]      # the hold ended
    suspects.mark("b")
    suspects.clear("b")                                          # it answered
    assert suspects.order(workers, str) == ["a", "b", "c"] and not suspects.suspect("b")
    with pytest.raises(InvalidArgument):
        Suspects(hold_s=-1)


@pytest.mark.parametrize("code", [errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.EAGAIN])
def test_a_reply_meaning_out_of_resources_is_overloaded_and_keeps_its_errno(code: int) -> None:
    error = from_errno(code, "too many open files")
    assert isinstance(error, Busy) and isinstance(error, Unavailable)   # a failover error
    assert error.errno == code


def test_other_replies_keep_their_class() -> None:
    assert type(from_errno(errno.ENOSPC, "full")) is NoSpace
    assert type(from_errno(errno.EHOSTUNREACH, "gone")) is Unavailable


def test_connection_refused_is_reported_as_refused() -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()                                   # nothing listens there now
    with pytest.raises(Unavailable) as info:
        WorkerConnection("127.0.0.1", port, token="", timeout_s=5.0, max_payload=1 << 20)
    assert info.value.errno == errno.ECONNREFUSED
    assert "Connection refused" in str(info.value)


def test_a_worker_that_never_answers_costs_the_deadline_not_the_data_timeout() -> None:
    # A listening socket nobody accepts from: the kernel completes the connect, HELLO is never
    # answered (as a worker out of file descriptors behaves).
    silent = socket.create_server(("127.0.0.1", 0), backlog=8)
    try:
        port = silent.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(Timeout):
            WorkerConnection("127.0.0.1", port, token="", timeout_s=60.0, max_payload=1 << 20,
                             deadline=time.monotonic() + 0.3)
        assert time.monotonic() - started < 10      # generous; the data timeout would be 60 s
    finally:
        silent.close()

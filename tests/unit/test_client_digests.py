"""client/digests.py: receiving or sending a payload chunk by chunk yields exactly the digests the
worker stores (layout.chunk_digests), for every length around the chunk boundaries; and a PUT sent
with its digest trailer by the client library's connection is stored by a real (in-process) worker."""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from curvine_py.client import digests as digests_module
from curvine_py.client.dataconn import WorkerConnection
from curvine_py.client.digests import (
    CHUNK,
    GROUP,
    OFFLOAD_MIN,
    fill_and_digest,
    receive_and_digest,
    send_and_digest,
)
from curvine_py.core import frames, layout
from curvine_py.core.errors import LocalProtocolError
from curvine_py.proto.curvine.v1.data_pb2 import DataHeader
from curvine_py.worker.server import DataServer, WorkerState
from curvine_py.worker.store import Store


@pytest.mark.parametrize("length", [1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK, 3 * CHUNK + 17])
def test_digests_match_the_stored_chunk_digests(length: int) -> None:
    source = os.urandom(length)
    target = memoryview(bytearray(length))
    calls: list[tuple[int, int]] = []

    def read_into(piece: memoryview, offset: int) -> None:
        calls.append((offset, len(piece)))
        piece[:] = source[offset:offset + len(piece)]

    digests = fill_and_digest(target, read_into)
    assert bytes(target) == source
    assert digests == layout.chunk_digests(source)
    assert [offset for offset, _ in calls] == list(range(0, length, CHUNK))
    assert all(size <= CHUNK for _, size in calls)
    assert sum(size for _, size in calls) == length


def test_a_failing_read_propagates() -> None:
    target = memoryview(bytearray(2 * CHUNK))

    def read_into(piece: memoryview, offset: int) -> None:
        if offset:
            raise ConnectionResetError("peer went away")

    with pytest.raises(ConnectionResetError):
        fill_and_digest(target, read_into)


def stream_reader(source: bytes, *, pause_s: float = 0.0,
                  fail_at: int | None = None) -> tuple[Callable[[memoryview], None], list[int]]:
    """A socket-like `read_into` over `source` (no offset: it keeps its own position), and the
    sizes it was asked for."""
    sizes: list[int] = []

    def read_into(piece: memoryview) -> None:
        at = sum(sizes)
        if fail_at is not None and at >= fail_at:
            raise ConnectionResetError("peer went away")
        sizes.append(len(piece))
        piece[:] = source[at:at + len(piece)]
        time.sleep(pause_s)
    return read_into, sizes


@pytest.mark.parametrize("length", [CHUNK + 1, OFFLOAD_MIN - 1, OFFLOAD_MIN, OFFLOAD_MIN + GROUP + 17, 32 * CHUNK])
def test_received_payloads_get_the_stored_digests_inline_or_hashed_aside(length: int) -> None:
    source = os.urandom(length)
    target = memoryview(bytearray(length))
    read_into, sizes = stream_reader(source)
    got = receive_and_digest(target, read_into, aside=True)
    # Complete when it returns (the helper's groups are all in), then the buffer is the caller's:
    # overwriting it changes nothing already returned.
    expected = layout.chunk_digests(source)
    assert got == expected
    target[:] = bytes(length)
    assert got == expected and bytes(target) == bytes(length)
    assert all(size <= CHUNK for size in sizes) and sum(sizes) == length
    if length >= OFFLOAD_MIN:
        assert any(t.name == "curvine-digests" for t in threading.enumerate())


def test_payloads_at_once_share_the_helper_or_hash_inline() -> None:
    """Several large payloads at once (a batch's connections): one has the helper, the others
    hash inline; every one gets its own digests."""
    sources = [os.urandom(OFFLOAD_MIN + CHUNK * i + 5) for i in range(4)]
    results: dict[int, list[int]] = {}

    def receive(index: int) -> None:
        read_into, _ = stream_reader(sources[index], pause_s=0.002)
        results[index] = receive_and_digest(memoryview(bytearray(len(sources[index]))), read_into, aside=True)

    threads = [threading.Thread(target=receive, args=(i,)) for i in range(len(sources))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == {i: layout.chunk_digests(source) for i, source in enumerate(sources)}


def test_a_payload_starting_beside_another_hashes_inline(monkeypatch: pytest.MonkeyPatch) -> None:
    """The helper serves a payload received alone: one that starts while another large payload is
    arriving (a batch's other connection) does not even ask for it."""
    hasher = digests_module._HASHER
    claims: list[str] = []
    claim = hasher.claim
    monkeypatch.setattr(hasher, "claim", lambda: claims.append(threading.current_thread().name) or claim())
    first, second = os.urandom(OFFLOAD_MIN), os.urandom(OFFLOAD_MIN + 3)
    started, second_done = threading.Event(), threading.Event()
    read_first, _ = stream_reader(first)

    def slow_first(piece: memoryview) -> None:
        read_first(piece)
        started.set()
        second_done.wait(10)     # stays mid-payload until the second one is done
    results: list[list[int]] = []
    thread = threading.Thread(target=lambda: results.append(
        receive_and_digest(memoryview(bytearray(len(first))), slow_first, aside=True)), name="first")
    thread.start()
    assert started.wait(10)
    read_second, _ = stream_reader(second)
    try:
        assert receive_and_digest(memoryview(bytearray(len(second))), read_second, aside=True) == \
            layout.chunk_digests(second)
    finally:
        second_done.set()
        thread.join()
    assert results == [layout.chunk_digests(first)] and claims == ["first"]


def test_a_receive_failing_mid_payload_propagates_and_frees_the_helper() -> None:
    source = os.urandom(2 * OFFLOAD_MIN)
    read_into, sizes = stream_reader(source, fail_at=OFFLOAD_MIN + GROUP)
    with pytest.raises(ConnectionResetError):
        receive_and_digest(memoryview(bytearray(len(source))), read_into, aside=True)
    assert sum(sizes) == OFFLOAD_MIN + GROUP
    hasher = digests_module._HASHER
    assert hasher.claim(), "the helper stayed claimed after a failed receive"
    hasher.finish()
    read_again, _ = stream_reader(source)
    assert receive_and_digest(memoryview(bytearray(len(source))), read_again, aside=True) == layout.chunk_digests(source)


def test_a_group_the_helper_cannot_hash_fails_verification_and_the_helper_lives_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    source = os.urandom(OFFLOAD_MIN)
    real = digests_module.checksum
    calls = [0]

    def flaky(piece: memoryview) -> int:
        calls[0] += 1
        if calls[0] == GROUP // CHUNK + 1:      # the first chunk of the second group
            raise ValueError("buffer gone")
        return real(piece)
    monkeypatch.setattr(digests_module, "checksum", flaky)
    read_into, _ = stream_reader(source)
    got = receive_and_digest(memoryview(bytearray(len(source))), read_into, aside=True)
    expected = layout.chunk_digests(source)
    group = GROUP // CHUNK
    assert got[:group] == expected[:group] and got[group:] == [digests_module.NO_DIGEST] * group
    monkeypatch.setattr(digests_module, "checksum", real)
    again, _ = stream_reader(source)
    assert receive_and_digest(memoryview(bytearray(len(source))), again, aside=True) == expected


def test_a_forked_child_hashes_aside_with_a_helper_of_its_own() -> None:
    """A child forked after the helper started (a serving stack's worker processes) has no helper
    thread and may inherit a held lock: its large receives still complete, with the right digests."""
    source = os.urandom(OFFLOAD_MIN)
    read_into, _ = stream_reader(source)
    assert receive_and_digest(memoryview(bytearray(len(source))), read_into, aside=True) == \
        layout.chunk_digests(source)
    hasher = digests_module._HASHER
    assert hasher.claim()      # held at the fork, as a parent's thread mid-payload would hold it
    try:
        pid = os.fork()
        if pid == 0:           # the child: exit 0 only if its receive completed and was right
            code = 1
            try:
                again, _ = stream_reader(source)
                got = receive_and_digest(memoryview(bytearray(len(source))), again, aside=True)
                code = 0 if got == layout.chunk_digests(source) and hasher.claim() else 2
            finally:
                os._exit(code)
        deadline = time.monotonic() + 20
        while (done := os.waitpid(pid, os.WNOHANG)) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                pytest.fail("the forked child's receive hung on the parent's helper")
            time.sleep(0.01)
        assert os.waitstatus_to_exitcode(done[1]) == 0
    finally:
        hasher.finish()


@pytest.mark.parametrize("length", [0, 1, CHUNK, CHUNK + 1, 3 * CHUNK + 17])
def test_send_and_digest_hashes_what_it_sends(length: int) -> None:
    source = os.urandom(length)
    sent: list[bytes] = []
    digests = send_and_digest(memoryview(source), lambda piece: sent.append(bytes(piece)))
    assert b"".join(sent) == source and all(len(piece) <= CHUNK for piece in sent)
    assert digests == layout.chunk_digests(source)


@pytest.fixture
def connection(tmp_path: os.PathLike[str]) -> Iterator[tuple[WorkerConnection, Store]]:
    with Store([(os.path.join(tmp_path, "d0"), 0)]) as store:
        server = DataServer(store, WorkerState("w"), host="127.0.0.1", port=0, token="", max_payload=16 * CHUNK)
        host, port = server.start()
        conn = WorkerConnection(host, port, token="", timeout_s=10, max_payload=16 * CHUNK)
        try:
            yield conn, store
        finally:
            conn.close()
            server.stop()


@pytest.mark.parametrize("length", [0, 100, 64 * 1024 + 1, 2 * CHUNK + 3])
def test_a_put_with_its_digest_trailer_reaches_the_worker(connection: tuple[WorkerConnection, Store],
                                                          length: int) -> None:
    conn, store = connection
    data = os.urandom(length)
    conn.request(frames.Op.PUT, DataHeader(key=f"k{length}", length=length, digest_trailer=True), data)
    stored = store.open_object(f"k{length}")
    assert stored is not None
    with stored:
        assert stored.read() == data
        assert list(stored.header.chunk_checksums) == layout.chunk_digests(data)
    assert conn.request(frames.Op.PING, DataHeader()).header.errno == 0


def test_a_trailer_length_that_does_not_match_the_payload_is_refused_locally(
        connection: tuple[WorkerConnection, Store]) -> None:
    conn, _ = connection
    with pytest.raises(LocalProtocolError):
        conn.request(frames.Op.PUT, DataHeader(key="k", length=5, digest_trailer=True), b"four")

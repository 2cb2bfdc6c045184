"""client/digests.py: receiving or sending a payload chunk by chunk yields exactly the digests the
worker stores (layout.chunk_digests), for every length around the chunk boundaries; and a PUT sent
with its digest trailer by the client library's connection is stored by a real (in-process) worker."""
from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from curvine_py.client.dataconn import WorkerConnection
from curvine_py.client.digests import CHUNK, fill_and_digest, send_and_digest
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

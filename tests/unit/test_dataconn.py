"""The client's data connection (client/dataconn.py) against a real in-process DataServer: pipelined
batches keep every reply matched to its request when some of them fail, the reply-head check
(ReplyStream.reply_head) takes what was asked for and refuses anything else with the right error,
and a payload is received and digested (ReplyStream.payload_digests) whichever way it arrives.
"""
from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator

import pytest

from curvine_py.client.dataconn import ReplyStream, WorkerConnection, _unsent
from curvine_py.core import frames, layout
from curvine_py.core.errors import (
    InvalidArgument,
    NameTooLong,
    ProtocolError,
    StaleEpoch,
    TooLarge,
    Unavailable,
)
from curvine_py.proto.curvine.v1.data_pb2 import DataHeader
from curvine_py.worker.server import DataServer, WorkerState
from curvine_py.worker.store import Store

MiB = 1 << 20
Op = frames.Op


@pytest.fixture
def address(tmp_path: os.PathLike[str]) -> Iterator[tuple[str, int]]:
    with Store([(os.path.join(tmp_path, "d0"), 0)], max_key_bytes=64) as store:
        server = DataServer(store, WorkerState("w-test", epoch=5), host="127.0.0.1", port=0, token="",
                            max_payload=64 * MiB)
        yield server.start()
        server.stop()


@pytest.fixture
def conn(address: tuple[str, int]) -> Iterator[WorkerConnection]:
    connection = WorkerConnection(*address, token="", timeout_s=10.0, max_payload=64 * MiB)
    yield connection
    connection.close()


def put(conn: WorkerConnection, key: str, data: bytes) -> None:
    header = DataHeader(key=key, length=len(data), digest_trailer=True)
    assert conn.request(Op.PUT, header, data).header.errno == 0


def test_error_replies_in_the_middle_of_a_batch_leave_the_others_matched(conn: WorkerConnection) -> None:
    values = {f"k{i}": os.urandom(size) for i, size in enumerate([10, 4096, MiB + 3, 0, 70_000, 2 * MiB])}
    for key, data in values.items():
        put(conn, key, data)
    # Between the hits: a stale epoch (ESTALE), a key too long for the worker (ENAMETOOLONG), a miss,
    # and a buffer too small for its object (drained here: InvalidArgument).
    plan: list[tuple[DataHeader, memoryview | None]] = []
    for key, data in values.items():
        plan.append((DataHeader(key=key), memoryview(bytearray(len(data) + 5))))
        plan.append((DataHeader(key=key, epoch=1), None))
    plan.insert(3, (DataHeader(key="x" * 100), None))
    plan.insert(6, (DataHeader(key="absent"), None))
    plan.insert(9, (DataHeader(key="k2"), memoryview(bytearray(100))))
    answers = conn.request_many(Op.GET, [h for h, _ in plan], [o for _, o in plan], depth=4)
    assert len(answers) == len(plan)
    for (header, out), answer in zip(plan, answers, strict=True):
        if header.epoch == 1:
            assert isinstance(answer, StaleEpoch)
        elif header.key == "x" * 100:
            assert isinstance(answer, NameTooLong)
        elif header.key == "absent":
            assert not isinstance(answer, Exception) and not answer.header.found and answer.payload is None
        elif out is not None and len(out) < len(values[header.key]):
            assert isinstance(answer, InvalidArgument) and "too small" in answer.message
        else:
            assert not isinstance(answer, Exception), answer
            data = values[header.key]
            assert answer.header.found and answer.header.length == len(data)
            got = b"" if answer.payload is None else bytes(answer.payload)
            assert got == data
            assert answer.digests == (layout.chunk_digests(data) if data else None)
            if out is not None and data:
                assert bytes(out[:len(data)]) == data   # landed in the caller's buffer
    assert conn.request(Op.PING, DataHeader()).header.errno == 0   # the stream is still in sync


def test_a_batch_larger_than_the_window_answers_every_request_in_order(conn: WorkerConnection) -> None:
    values = [os.urandom(1000 + i) for i in range(40)]
    for i, data in enumerate(values):
        put(conn, f"w{i}", data)
    answers = conn.request_many(Op.GET, [DataHeader(key=f"w{i}") for i in range(40)], [None] * 40, depth=3)
    assert [bytes(a.payload) for a in answers if not isinstance(a, Exception) and a.payload is not None] == values


def test_single_requests_carry_error_replies_and_keep_the_connection(conn: WorkerConnection) -> None:
    put(conn, "a", b"abc")
    with pytest.raises(StaleEpoch):
        conn.request(Op.GET, DataHeader(key="a", epoch=1))
    reply = conn.request(Op.GET, DataHeader(key="a"), out=memoryview(bytearray(8)), digest=True)
    assert reply.payload is not None and bytes(reply.payload) == b"abc"
    assert reply.digests == layout.chunk_digests(b"abc")


class FakeReplies:
    """A socket pair: frames written on one end, a ReplyStream on the other."""

    def __init__(self) -> None:
        self.ours, self.theirs = socket.socketpair()
        self.stream = ReplyStream(self.ours)

    def send(self, data: bytes) -> None:
        self.theirs.sendall(data)

    def close(self) -> None:
        self.ours.close()
        self.theirs.close()


@pytest.fixture
def fake() -> Iterator[FakeReplies]:
    pair = FakeReplies()
    yield pair
    pair.close()


def reply(op: Op, request_id: int, header: DataHeader, payload: bytes = b"") -> bytes:
    return frames.encode(op, request_id, header, len(payload), response=True) + payload


def test_reply_head_takes_the_expected_reply_and_leaves_its_payload(fake: FakeReplies) -> None:
    fake.send(reply(Op.GET, 7, DataHeader(found=True, length=5), b"hello") + reply(Op.PING, 8, DataHeader()))
    length, header = fake.stream.reply_head(Op.GET, 7, 1024)
    assert (length, header.found, header.length) == (5, True, 5)
    out = memoryview(bytearray(5))
    fake.stream.read_into(out)
    assert bytes(out) == b"hello"
    assert fake.stream.reply_head(Op.PING, 8, 1024) == (0, DataHeader())


def test_reply_head_completes_a_head_that_arrives_in_pieces(fake: FakeReplies) -> None:
    frame = reply(Op.GET, 3, DataHeader(found=True, length=2, user_meta=b"m" * 300), b"ok")
    sender = threading.Thread(target=lambda: [fake.send(frame[i:i + 7]) for i in range(0, len(frame), 7)])
    sender.start()
    length, header = fake.stream.reply_head(Op.GET, 3, 1024)
    sender.join()
    assert length == 2 and header.user_meta == b"m" * 300


@pytest.mark.parametrize(("frame", "error", "words"), [
    (reply(Op.GET, 8, DataHeader()), ProtocolError, "GET#8 to GET#7"),           # another request's reply
    (reply(Op.PING, 7, DataHeader()), ProtocolError, "PING#7 to GET#7"),          # another op's reply
    (frames.encode(Op.GET, 7, DataHeader()), ProtocolError, "expected a response"),   # not a reply
    (b"XX" + reply(Op.GET, 7, DataHeader())[2:], ProtocolError, "bad magic"),
    (reply(Op.GET, 7, DataHeader(), b"x" * 2048), TooLarge, "exceeds the limit"),  # above max_payload
])
def test_reply_head_refuses_what_was_not_asked_for(fake: FakeReplies, frame: bytes, error: type[Exception],
                                                   words: str) -> None:
    fake.send(frame)
    with pytest.raises(error, match=words):
        fake.stream.reply_head(Op.GET, 7, 1024)


def test_reply_head_at_eof_is_unavailable(fake: FakeReplies) -> None:
    fake.send(reply(Op.GET, 7, DataHeader())[:9])
    fake.theirs.shutdown(socket.SHUT_WR)
    with pytest.raises(Unavailable, match="closed inside a frame"):
        fake.stream.reply_head(Op.GET, 7, 1024)


@pytest.mark.parametrize("size", [1, 4096, layout.CHUNK_SIZE - 1, layout.CHUNK_SIZE, layout.CHUNK_SIZE + 1])
def test_puts_around_one_chunk_arrive_whole_and_verified(conn: WorkerConnection, size: int) -> None:
    """Up to one chunk a put leaves in one sendmsg with its trailer; above, chunk by chunk: the
    worker checks the trailer's digests either way and the bytes read back are the bytes sent."""
    data = os.urandom(size)
    put(conn, f"edge-{size}", data)
    reply = conn.request(Op.GET, DataHeader(key=f"edge-{size}"), digest=True)
    assert reply.header.found and bytes(reply.payload or b"") == data


def test_a_send_cut_short_resumes_at_the_first_unsent_byte() -> None:
    head, body, tail = b"head", memoryview(b"0123456789"), b"tr"
    pieces: list[bytes | memoryview] = [head, body, tail]
    joined = b"head0123456789tr"
    for sent in range(len(joined)):
        assert b"".join(bytes(p) for p in _unsent(pieces, sent)) == joined[sent:]


@pytest.mark.parametrize("size", [1, 5000, MiB - 1, MiB, 2 * MiB + 3])
@pytest.mark.parametrize("piece", [7, 65536])
def test_a_payload_arrives_whole_with_its_digests_however_it_is_cut(fake: FakeReplies, size: int,
                                                                   piece: int) -> None:
    """Part of it with the head, the rest in pieces: the buffer holds exactly the bytes sent and
    the digests are those of its chunks."""
    payload = os.urandom(size)
    frame = reply(Op.GET, 4, DataHeader(found=True, length=size), payload)
    sender = threading.Thread(target=lambda: [fake.send(frame[i:i + piece]) for i in range(0, len(frame), piece)])
    sender.start()
    try:
        length, header = fake.stream.reply_head(Op.GET, 4, 4 * MiB)
        out = memoryview(bytearray(length))
        digests = fake.stream.payload_digests(out)
    finally:
        sender.join()
    assert header.found and length == size
    assert bytes(out) == payload and digests == layout.chunk_digests(payload)


def test_a_peer_gone_mid_payload_is_unavailable(fake: FakeReplies) -> None:
    fake.send(reply(Op.GET, 4, DataHeader(found=True, length=100), b"x" * 100)[:-40])
    fake.theirs.shutdown(socket.SHUT_WR)
    length, _ = fake.stream.reply_head(Op.GET, 4, 1024)
    with pytest.raises(Unavailable, match="closed after 60 of 100 bytes"):
        fake.stream.payload_digests(memoryview(bytearray(length)))


def test_a_malformed_header_that_came_whole_is_a_protocol_error(fake: FakeReplies) -> None:
    fake.send(frames.PREFIX.pack(frames.MAGIC, frames.VERSION, int(Op.GET) | frames.RESPONSE_BIT, 7, 3, 0)
              + b"\xff\xff\xff")
    with pytest.raises(ProtocolError, match="malformed frame header"):
        fake.stream.reply_head(Op.GET, 7, 1024)


def test_a_get_into_a_buffer_too_small_is_refused_and_the_connection_stays_in_sync(conn: WorkerConnection) -> None:
    put(conn, "big", b"0123456789")
    with pytest.raises(InvalidArgument, match="too small"):
        conn.request(Op.GET, DataHeader(key="big"), out=memoryview(bytearray(4)), digest=True)
    reply = conn.request(Op.GET, DataHeader(key="big"), out=memoryview(bytearray(16)), digest=True)
    assert reply.payload is not None and bytes(reply.payload) == b"0123456789"
    assert reply.digests == layout.chunk_digests(b"0123456789")

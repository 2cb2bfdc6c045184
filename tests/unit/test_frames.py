"""Data-plane codec: round trips, and every way a peer's garbage is rejected (sans-IO, no sockets)."""
from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from curvine_py.core import frames, layout
from curvine_py.core.errors import InvalidArgument, LocalProtocolError, ProtocolError, TooLarge
from curvine_py.proto.curvine.v1.data_pb2 import DataHeader

LIMIT = 1 << 20


def decode_all(data: bytes, *, expect_response: bool = False) -> list[frames.Frame]:
    decoder = frames.FrameDecoder(max_payload=LIMIT, expect_response=expect_response)
    decoder.receive(data)
    out = []
    while (frame := decoder.next_frame()) is not None:
        out.append(frame)
    return out


@given(op=st.sampled_from(sorted(frames.REQUEST_PAYLOAD_OPS)), request_id=st.integers(0, 2**32 - 1),
       key=st.text(max_size=200), payload=st.binary(max_size=4096), meta=st.binary(max_size=300))
def test_request_round_trip(op: frames.Op, request_id: int, key: str, payload: bytes, meta: bytes) -> None:
    header = DataHeader(key=key, user_meta=meta, length=len(payload), checksum=123)
    [frame] = decode_all(frames.encode(op, request_id, header, len(payload)) + payload)
    assert (frame.prefix.op, frame.prefix.request_id, frame.payload) == (op, request_id, payload)
    assert frame.header == header and not frame.prefix.is_response


def test_response_round_trip_and_byte_by_byte_feeding() -> None:
    header = DataHeader(found=True, length=5, chunk_checksums=[1, 2])
    wire = frames.encode(frames.Op.GET, 9, header, 5, response=True) + b"hello"
    decoder = frames.FrameDecoder(max_payload=LIMIT, expect_response=True)
    frame = None
    for byte in wire:
        assert frame is None
        decoder.receive(bytes([byte]))
        frame = decoder.next_frame()
    assert frame is not None and frame.payload == b"hello" and frame.prefix.is_response


def test_two_frames_in_one_read() -> None:
    wire = frames.encode(frames.Op.PING, 1, DataHeader()) + frames.encode(frames.Op.EXISTS, 2, DataHeader(keys=["a"]))
    assert [f.prefix.request_id for f in decode_all(wire)] == [1, 2]


def prefix(magic: bytes = b"CV", version: int = 1, code: int = 3, header_len: int = 0, payload: int = 0) -> bytes:
    return struct.pack("<2sBBIIQ", magic, version, code, 1, header_len, payload)


@pytest.mark.parametrize("wire, error", [
    (prefix(magic=b"XX"), ProtocolError),
    (prefix(version=9), ProtocolError),
    (prefix(code=77), ProtocolError),                      # unknown op
    (prefix(code=0x80 | 3), ProtocolError),                # a response where a request is expected
    (prefix(header_len=frames.MAX_HEADER + 1), ProtocolError),
    (prefix(code=int(frames.Op.GET), payload=10), ProtocolError),   # GET requests carry no payload
    (prefix(code=int(frames.Op.PUT), payload=LIMIT + 1), TooLarge),  # refused before reading it
    (prefix(header_len=3) + b"\xff\xff\xff", ProtocolError),         # header is not protobuf
])
def test_garbage_is_rejected(wire: bytes, error: type[Exception]) -> None:
    with pytest.raises(error):
        decode_all(wire)


@given(st.binary(min_size=frames.PREFIX_SIZE, max_size=200))
def test_random_bytes_never_crash_the_decoder(data: bytes) -> None:
    try:
        decode_all(data)
    except (ProtocolError, TooLarge):
        pass


def test_local_misuse_is_a_different_error() -> None:
    with pytest.raises(LocalProtocolError):
        frames.encode(frames.Op.GET, 1, DataHeader(), payload_length=10)   # GET request with payload
    with pytest.raises(LocalProtocolError):
        frames.encode(frames.Op.PING, 2**32, DataHeader())
    with pytest.raises(LocalProtocolError):
        frames.encode(frames.Op.PUT, 1, DataHeader(user_meta=b"x" * (frames.MAX_HEADER + 1)))


# -- digest trailer (PUT/WRITE_BLOCK with DataHeader.digest_trailer) --------------------------------
@given(length=st.integers(0, 5 * (1 << 20)), digests=st.data())
def test_digest_trailer_round_trip(length: int, digests: st.DataObject) -> None:
    count = layout.chunk_count(length)
    values = digests.draw(st.lists(st.integers(0, 2**64 - 1), min_size=count, max_size=count))
    trailer = frames.encode_trailer(values)
    assert len(trailer) == frames.trailer_size(length) == 8 * count
    assert frames.decode_trailer(trailer, length) == tuple(values)


@pytest.mark.parametrize("length, size", [(1, 0), (1, 16), ((1 << 20) + 1, 8), (0, 8)])
def test_digest_trailer_of_the_wrong_size_is_rejected(length: int, size: int) -> None:
    with pytest.raises(ProtocolError):
        frames.decode_trailer(b"\0" * size, length)


def test_object_length_with_and_without_a_trailer() -> None:
    assert frames.object_length(DataHeader(), 100) == 100
    assert frames.object_length(DataHeader(length=100), 100) == 100
    assert frames.object_length(DataHeader(length=100, digest_trailer=True), 108) == 100
    assert frames.object_length(DataHeader(length=0, digest_trailer=True), 0) == 0
    big = 3 * (1 << 20) + 1
    assert frames.object_length(DataHeader(length=big, digest_trailer=True), big + 32) == big


@pytest.mark.parametrize("header, payload", [
    (DataHeader(length=100), 99),                          # length disagrees with the payload
    (DataHeader(length=100, digest_trailer=True), 100),    # trailer missing
    (DataHeader(length=100, digest_trailer=True), 116),    # one digest too many
    (DataHeader(digest_trailer=True), 8),                  # a trailer needs the length
])
def test_object_length_mismatch_is_invalid_argument(header: DataHeader, payload: int) -> None:
    with pytest.raises(InvalidArgument):
        frames.object_length(header, payload)


def test_a_put_with_its_trailer_decodes_as_one_frame() -> None:
    data = bytes(range(256)) * 5
    header = DataHeader(key="k", length=len(data), digest_trailer=True)
    trailer = frames.encode_trailer(layout.chunk_digests(data))
    [frame] = decode_all(frames.encode(frames.Op.PUT, 3, header, len(data) + len(trailer)) + data + trailer)
    length = frames.object_length(frame.header, frame.prefix.payload_length)
    assert frame.payload[:length] == data
    assert frames.decode_trailer(frame.payload[length:], length) == tuple(layout.chunk_digests(data))

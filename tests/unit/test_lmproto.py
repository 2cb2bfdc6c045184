"""lm:// codec: golden bytes captured from lmcache 0.5.6's own serializers, round trips, every
opcode, and rejection of short, garbage and oversized input. No lmcache import here: the
cross-check against the installed package lives in tests/lmcache/test_lmproto_conformance.py."""
from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from curvine_py.core import lmproto
from curvine_py.core.errors import LocalProtocolError, ProtocolError, TooLarge
from curvine_py.core.lmproto import (
    FAIL_REPLY,
    REPLY_SIZE,
    REQUEST_SIZE,
    SUCCESS_REPLY,
    Command,
    Dtype,
    MemoryFormat,
    ObjectMeta,
    ReturnCode,
    encode_exist,
    encode_hit,
    encode_reply,
    encode_request,
    parse_reply,
    parse_request,
)

LLAMA_KEY = "meta-llama/Llama-3.1-8B@1@0@1234abcd5678ef@bfloat16"
LLAMA_META = ObjectMeta(33554432, MemoryFormat.KV_2LTD, Dtype.BFLOAT16, (2, 32, 256, 1024))
# ClientMetaMessage(PUT, key, 33554432, KV_2LTD, torch.bfloat16, [2,32,256,1024]).serialize()[:36]
GOLDEN_PUT_INTS = "010000000000000201000000030000000000000002000000200000000001000000040000"
# ServerMetaMessage(FAIL, 0, MemoryFormat(1), torch.float16, [0,0,0,0]).serialize()
GOLDEN_FAIL = "900100000000000001000000020000000000000000000000000000000000000000000000"
# RemoteMetadata(524288, [[2,4,256,128]], [bfloat16], KV_2LTD).serialize() with one group
GOLDEN_DESCRIPTOR = "00000800010000000300000002000000040000000001000080000000"


def raw_request(command: int = 2, length: int = 0, fmt: int = 1, dtype: int = 2, location: int = 0,
                shape: tuple[int, int, int, int] = (0, 0, 0, 0), key: bytes = b"m@1@0@ab@half") -> bytes:
    return struct.pack("<9i150s", command, length, fmt, dtype, location, *shape, key.ljust(150))


def test_sizes_match_lmcache() -> None:
    assert REQUEST_SIZE == 186 == struct.calcsize("iiiiiiiii150s")
    assert REPLY_SIZE == 36 == struct.calcsize("iiiiiiiii")
    assert lmproto.DESCRIPTOR_SIZE == 28


def test_put_header_matches_golden_bytes() -> None:
    wire = encode_request(Command.PUT, LLAMA_KEY, LLAMA_META)
    assert len(wire) == REQUEST_SIZE
    assert wire[:36].hex() == GOLDEN_PUT_INTS
    assert wire[36:] == LLAMA_KEY.encode().ljust(150, b" ")
    req = parse_request(wire)
    assert req.command is Command.PUT
    assert req.key == LLAMA_KEY
    assert req.meta == LLAMA_META
    assert req.payload_length == 33554432
    assert req.meta.expected_length() == 33554432


def test_fail_reply_is_byte_identical_to_stock_server() -> None:
    assert FAIL_REPLY.hex() == GOLDEN_FAIL
    assert encode_exist(False) == FAIL_REPLY
    assert SUCCESS_REPLY == struct.pack("<9i", 200, 0, 1, 2, 0, 0, 0, 0, 0)
    assert encode_exist(True) == SUCCESS_REPLY


def test_reply_puts_location_last() -> None:
    wire = encode_hit(LLAMA_META)
    assert struct.unpack("<9i", wire) == (200, 33554432, 1, 3, 2, 32, 256, 1024, 0)
    reply = parse_reply(wire)
    assert reply.ok and reply.code is ReturnCode.SUCCESS
    assert reply.meta == LLAMA_META


def test_descriptor_matches_remote_metadata() -> None:
    meta = ObjectMeta(524288, MemoryFormat.KV_2LTD, Dtype.BFLOAT16, (2, 4, 256, 128))
    assert meta.pack().hex() == GOLDEN_DESCRIPTOR
    assert ObjectMeta.unpack(bytes.fromhex(GOLDEN_DESCRIPTOR)) == meta


@pytest.mark.parametrize("command", list(Command))
def test_every_opcode_round_trips(command: Command) -> None:
    meta = LLAMA_META if command is Command.PUT else None
    req = parse_request(encode_request(command, LLAMA_KEY, meta))
    assert req.command is command
    assert req.key == LLAMA_KEY
    assert req.payload_length == (LLAMA_META.length if command is Command.PUT else 0)


def test_get_and_exist_carry_client_defaults() -> None:
    # The 0.5.6 client sends fmt 1, dtype 2 (fp16), zero shape, length 0 for GET and EXIST.
    for command in (Command.GET, Command.EXIST):
        req = parse_request(raw_request(command=command))
        assert req.meta == ObjectMeta(0, MemoryFormat.KV_2LTD, Dtype.FLOAT16, (0, 0, 0, 0))


def test_health_and_list_may_have_no_key() -> None:
    assert parse_request(raw_request(command=5, key=b"")).key == ""
    assert parse_request(raw_request(command=4, key=b"")).command is Command.LIST


@pytest.mark.parametrize("dtype", list(Dtype))
@pytest.mark.parametrize("fmt", list(MemoryFormat))
def test_every_dtype_and_format_round_trips(dtype: Dtype, fmt: MemoryFormat) -> None:
    meta = ObjectMeta(4096, fmt, dtype, (4096, 0, 0, 0))
    assert parse_request(encode_request(Command.PUT, "k", meta)).meta == meta
    assert parse_reply(encode_hit(meta)).meta == meta
    assert ObjectMeta.unpack(meta.pack()) == meta


def test_half_code_one_is_accepted_as_fp16() -> None:
    req = parse_request(raw_request(command=1, length=8, dtype=1, shape=(4, 0, 0, 0)))
    assert req.meta.dtype is Dtype.HALF
    assert req.meta.expected_length() == 8


def test_expected_length() -> None:
    assert ObjectMeta(10, MemoryFormat.BINARY_BUFFER, Dtype.NONE, (10, 0, 0, 0)).expected_length() is None
    assert ObjectMeta(0, MemoryFormat.KV_2LTD, Dtype.FLOAT32, (2, 3, 0, 0)).expected_length() == 24
    assert ObjectMeta(0, MemoryFormat.KV_MLA_FMT, Dtype.FLOAT8_E4M3FN, (1, 2, 3, 4)).expected_length() == 24


def test_key_padding_nul_and_space() -> None:
    assert parse_request(raw_request(key=b"m@1@0@ab@half".ljust(150, b"\x00"))).key == "m@1@0@ab@half"
    assert parse_request(raw_request(key=b"m@1@0@ab@half   ")).key == "m@1@0@ab@half"
    full = ("x" * 150).encode()
    assert parse_request(raw_request(key=full)).key == "x" * 150


def test_utf8_key() -> None:
    key = "modèle@1@0@-29791f34f3dbf79a@half"
    assert parse_request(encode_request(Command.EXIST, key)).key == key


@pytest.mark.parametrize("bad", [
    raw_request(command=0), raw_request(command=6), raw_request(command=-1), raw_request(command=200),
    raw_request(command=1, length=-5),
    raw_request(fmt=9), raw_request(fmt=-1),
    raw_request(dtype=9), raw_request(dtype=-2),
    raw_request(location=3),
    raw_request(shape=(2, -1, 0, 0)),
    raw_request(command=2, length=10),  # only PUT carries a payload
    raw_request(command=3, length=1),
    raw_request(key=b""),  # keyed op without a key
    raw_request(command=1, length=4, key=b"   "),
    raw_request(key=b"\xff\xfe bad utf8"),
    raw_request(key=b"a\x00b"),
    raw_request(key=b"line\nbreak"),
    b"\xff" * REQUEST_SIZE,
    b"GET /index.html HTTP/1.1\r\nHost: x\r\n\r\n".ljust(REQUEST_SIZE, b"\x00"),
])
def test_garbage_is_protocol_error(bad: bytes) -> None:
    with pytest.raises(ProtocolError):
        parse_request(bad)


def test_oversized_put_is_refused_before_payload() -> None:
    wire = raw_request(command=1, length=1 << 20, shape=(1 << 19, 0, 0, 0))
    with pytest.raises(TooLarge):
        parse_request(wire, max_payload=(1 << 20) - 1)
    assert parse_request(wire, max_payload=1 << 20).payload_length == 1 << 20


@pytest.mark.parametrize("size", [0, 1, 35, 185, 187, 400])
def test_wrong_header_size_is_local_misuse(size: int) -> None:
    with pytest.raises(LocalProtocolError):
        parse_request(b"\x00" * size)
    with pytest.raises(LocalProtocolError):
        parse_reply(b"\x00" * min(size, 35))


def test_reply_garbage() -> None:
    with pytest.raises(ProtocolError):
        parse_reply(struct.pack("<9i", 201, 0, 1, 2, 0, 0, 0, 0, 0))
    with pytest.raises(ProtocolError):
        parse_reply(struct.pack("<9i", 200, 0, 1, 2, 0, 0, 0, 0, 7))
    with pytest.raises(ProtocolError):
        parse_reply(struct.pack("<9i", 200, -1, 1, 2, 0, 0, 0, 0, 0))


def test_encoders_reject_misuse() -> None:
    with pytest.raises(LocalProtocolError):
        encode_request(Command.GET, "k" * 151)
    with pytest.raises(LocalProtocolError):
        encode_request(Command.GET, "k", ObjectMeta(5))
    with pytest.raises(LocalProtocolError):
        encode_request(Command.GET, "a\nb")
    with pytest.raises(LocalProtocolError):
        encode_request(Command.GET, " padded")
    with pytest.raises(LocalProtocolError):
        encode_hit(ObjectMeta(2**31))
    with pytest.raises(LocalProtocolError):
        encode_reply(ReturnCode.SUCCESS, ObjectMeta(1, shape=(1, 2, 3)))  # type: ignore[arg-type]
    with pytest.raises(LocalProtocolError):
        ObjectMeta(-1).pack()
    with pytest.raises(LocalProtocolError):
        ObjectMeta.unpack(b"\x00" * 27)


def test_decoder_splits_stream_into_requests() -> None:
    payload = bytes(range(256)) * 4
    meta = ObjectMeta(len(payload), MemoryFormat.KV_2LTD, Dtype.UINT8, (len(payload), 0, 0, 0))
    stream = (encode_request(Command.PUT, "a", meta) + payload + encode_request(Command.GET, "a")
              + encode_request(Command.EXIST, "b"))
    decoder = lmproto.RequestDecoder()
    got = []
    for i in range(0, len(stream), 7):  # worst case: tiny, misaligned segments
        decoder.receive(stream[i:i + 7])
        while (item := decoder.next_request()) is not None:
            got.append(item)
    decoder.receive_eof()
    assert [(r.command, r.key, p) for r, p in got] == [
        (Command.PUT, "a", payload), (Command.GET, "a", b""), (Command.EXIST, "b", b"")]


def test_decoder_eof_mid_header_and_mid_payload() -> None:
    decoder = lmproto.RequestDecoder()
    decoder.receive(encode_request(Command.GET, "a")[:100])
    assert decoder.next_request() is None
    with pytest.raises(ProtocolError):
        decoder.receive_eof()
    decoder = lmproto.RequestDecoder()
    decoder.receive(encode_request(Command.PUT, "a", ObjectMeta(10, shape=(5, 0, 0, 0))) + b"12345")
    assert decoder.next_request() is None
    with pytest.raises(ProtocolError):
        decoder.receive_eof()


def test_decoder_oversized() -> None:
    decoder = lmproto.RequestDecoder(max_payload=100)
    decoder.receive(encode_request(Command.PUT, "a", ObjectMeta(101, shape=(101, 0, 0, 0))))
    with pytest.raises(TooLarge):
        decoder.next_request()


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=REQUEST_SIZE, max_size=REQUEST_SIZE))
def test_fuzz_request_never_crashes(data: bytes) -> None:
    try:
        req = parse_request(data, max_payload=1 << 30)
    except (ProtocolError, TooLarge):
        return
    assert parse_request(encode_request(req.command, req.key,
                                        req.meta if req.command is Command.PUT else None)).key == req.key


@settings(max_examples=200, deadline=None)
@given(command=st.sampled_from(list(Command)),
       key=st.text(st.characters(min_codepoint=0x21, max_codepoint=0x2FFF, blacklist_categories=("Cc", "Cs")),
                   min_size=1, max_size=37),
       length=st.integers(0, 2**31 - 1), fmt=st.sampled_from(list(MemoryFormat)),
       dtype=st.sampled_from(list(Dtype)), shape=st.tuples(*[st.integers(0, 2**31 - 1)] * 4))
def test_fuzz_round_trip(command: Command, key: str, length: int, fmt: MemoryFormat, dtype: Dtype,
                         shape: tuple[int, int, int, int]) -> None:
    meta = ObjectMeta(length if command is Command.PUT else 0, fmt, dtype, shape)
    req = parse_request(encode_request(command, key, meta))
    assert (req.command, req.key, req.meta) == (command, key, meta)
    assert parse_reply(encode_hit(meta)).meta == meta

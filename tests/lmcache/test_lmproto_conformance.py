"""curvine_py.core.lmproto against the INSTALLED lmcache 0.5.6: byte-for-byte equality with its own
serializers (lmcache/v1/protocol.py ClientMetaMessage, ServerMetaMessage, RemoteMetadata), its
constants, and then the real client (LMCServerConnector inside a real engine, and
`basic_check --mode test_remote`) against a server built only on lmproto (spec_server.py).

On LMCache >= 0.5.7 (no lm:// client or server any more) the lm:// tests skip, saying so; what
still runs there: RemoteMetadata (moved to lmcache.inprocess.v1.protocol; the in-process native
plugin keeps it with every object) equals lmproto's descriptor, and the spec server's own checks."""
from __future__ import annotations

import itertools
import socket
import struct
from collections.abc import Iterator

import pytest

from tests.lmcache.harness import (
    engine_config,
    has_lm_protocol,
    lmcache_version,
    require_lmcache,
    run_remote_basic_check,
    store_and_retrieve,
)

require_lmcache()

import importlib

import torch
from lmcache.utils import CacheEngineKey
from lmcache.v1.memory_management import MemoryFormat as StockFormat

from curvine_py.core import lmproto
from curvine_py.core.lmproto import Command, Dtype, MemoryFormat, ObjectMeta, ReturnCode
from tests.lmcache.spec_server import SpecLMServer

HAS_LM = has_lm_protocol()
# The lm:// serializers live in lmcache.v1.protocol up to 0.5.6; 0.5.7 keeps only RemoteMetadata,
# in lmcache.inprocess.v1.protocol (with the dtype maps re-exported).
stock = importlib.import_module("lmcache.v1.protocol" if HAS_LM else "lmcache.inprocess.v1.protocol")
lm_client = pytest.mark.skipif(not HAS_LM, reason=f"LMCache {lmcache_version()} removed lm:// (client, server and "
                               "its serializers, 0.5.7): lm:// conformance is tested with LMCache <= 0.5.6")

KEYS = [
    CacheEngineKey("meta-llama/Llama-3.1-8B", 1, 0, 0x1234ABCD5678EF, torch.bfloat16),
    CacheEngineKey("Qwen/Qwen3-8B", 4, 3, -0x29791F34F3DBF79A, torch.float16),  # builtin hash < 0
    CacheEngineKey("m", 2, 1, 7, torch.float8_e4m3fn, {"lmcache.tag.user": "alice"}),
]
SHAPES: list[tuple[int, ...]] = [(2, 32, 256, 1024), (2, 4, 256), (8192,), (1, 61, 256, 576)]
STOCK_DTYPES = [d for d in stock.DTYPE_TO_INT if d is not None]


def pad(shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    return (tuple(shape) + (0, 0, 0, 0))[:4]  # type: ignore[return-value]


@lm_client
def test_constants_match_installed_lmcache() -> None:
    assert stock.MAX_KEY_LENGTH == lmproto.MAX_KEY_LENGTH
    assert stock.ClientMetaMessage.packlength() == lmproto.REQUEST_SIZE == 186
    assert stock.ServerMetaMessage.packlength() == lmproto.REPLY_SIZE == 36
    assert {c.name: int(c.value) for c in stock.ClientCommand} == {c.name: int(c) for c in Command}
    assert {c.name: int(c.value) for c in stock.ServerReturnCode} == {c.name: int(c) for c in ReturnCode}
    assert {f.name: f.value for f in StockFormat} == {f.name: int(f) for f in MemoryFormat}
    for code, dtype in stock.INT_TO_DTYPE.items():
        ours = Dtype(code)
        if dtype is None:
            assert ours is Dtype.NONE
        else:
            assert lmproto.DTYPE_ITEMSIZE[ours] == torch.empty((), dtype=dtype).element_size()
    # torch.half is torch.float16: the client always sends 2, never 1.
    assert stock.DTYPE_TO_INT[torch.half] == Dtype.FLOAT16


@lm_client
@pytest.mark.parametrize("key", KEYS, ids=lambda k: k.to_string()[:24])
def test_requests_byte_identical(key: CacheEngineKey) -> None:
    for command, fmt, dtype, shape in itertools.product(
            stock.ClientCommand, [StockFormat.KV_2LTD, StockFormat.KV_MLA_FMT, StockFormat.BINARY_BUFFER],
            STOCK_DTYPES, SHAPES):
        length = 12345 if command == stock.ClientCommand.PUT else 0
        theirs = stock.ClientMetaMessage(command, key, length, fmt, dtype, torch.Size(shape)).serialize()
        meta = ObjectMeta(length, MemoryFormat(fmt.value), Dtype(stock.DTYPE_TO_INT[dtype]), pad(shape))
        ours = lmproto.encode_request(Command(command.value), key.to_string(), meta)
        assert ours == theirs, (command, fmt, dtype, shape)
        parsed = lmproto.parse_request(theirs)
        assert (parsed.command, parsed.key, parsed.meta) == (Command(command.value), key.to_string(), meta)
        back = stock.ClientMetaMessage.deserialize(ours)
        assert back.key == key and back.length == length and back.dtype == dtype


@lm_client
def test_client_get_and_exist_defaults_parse() -> None:
    # Exactly what lm_connector.py sends for GET/EXIST.
    for command in (stock.ClientCommand.GET, stock.ClientCommand.EXIST):
        wire = stock.ClientMetaMessage(command, KEYS[0], 0, StockFormat(1), torch.float16,
                                       torch.Size([0, 0, 0, 0])).serialize()
        req = lmproto.parse_request(wire)
        assert req.payload_length == 0
        assert lmproto.encode_request(req.command, req.key) == wire


@lm_client
def test_replies_byte_identical() -> None:
    for code, fmt, dtype, shape in itertools.product(
            stock.ServerReturnCode, [StockFormat.KV_2LTD, StockFormat.KV_T2D, StockFormat.BINARY],
            STOCK_DTYPES, SHAPES):
        theirs = stock.ServerMetaMessage(code, 777, fmt, dtype, torch.Size(shape)).serialize()
        meta = ObjectMeta(777, MemoryFormat(fmt.value), Dtype(stock.DTYPE_TO_INT[dtype]), pad(shape))
        assert lmproto.encode_reply(ReturnCode(code.value), meta) == theirs
        assert lmproto.parse_reply(theirs).meta == meta
        back = stock.ServerMetaMessage.deserialize(lmproto.encode_reply(ReturnCode(code.value), meta))
        assert back.length == 777 and back.dtype == dtype and back.fmt == fmt


@lm_client
def test_canned_replies_equal_stock_server_replies() -> None:
    # lmcache/v1/server/__main__.py: FAIL (GET miss, EXIST miss) and SUCCESS (EXIST hit, HEALTH)
    # are sent with fmt 1, dtype torch.float16, zero shape.
    for code, ours in ((stock.ServerReturnCode.FAIL, lmproto.FAIL_REPLY),
                       (stock.ServerReturnCode.SUCCESS, lmproto.SUCCESS_REPLY)):
        theirs = stock.ServerMetaMessage(code, 0, StockFormat(1), torch.float16,
                                         torch.Size((0, 0, 0, 0))).serialize()
        assert ours == theirs


def test_descriptor_equals_remote_metadata_one_group() -> None:
    stock.init_remote_metadata_info(1)
    for fmt, dtype, shape in itertools.product([StockFormat.KV_2LTD, StockFormat.KV_MLA_FMT],
                                               STOCK_DTYPES, SHAPES):
        theirs = stock.RemoteMetadata(4096, [torch.Size(shape)], [dtype], fmt).serialize()
        meta = ObjectMeta(4096, MemoryFormat(fmt.value), Dtype(stock.DTYPE_TO_INT[dtype]), pad(shape))
        assert meta.pack() == theirs
        assert ObjectMeta.unpack(theirs) == meta


# -- the real client against a server built only on lmproto -----------------------------------

@pytest.fixture(scope="module")
def spec_server() -> Iterator[SpecLMServer]:
    with SpecLMServer() as server:
        yield server


@lm_client
def test_real_engines_against_spec_server(spec_server: SpecLMServer) -> None:
    writer, reader = store_and_retrieve(engine_config(remote_url=spec_server.url), tokens=1024, seed=21)
    assert writer.op("flush")["put_failed"] == 0
    assert reader.op("miss")["hit_tokens"] == 0
    retrieve = reader.op("retrieve")
    assert (retrieve["hit_tokens"], retrieve["bit_exact"]) == (1024, True)
    assert spec_server.protocol_errors == []
    assert spec_server.requests[Command.PUT] == 4
    # What the server stored is what the client described: KV_2LTD bf16 [2, L, 256, H*D].
    metas = {meta for meta, _ in spec_server.store.values()}
    assert metas == {ObjectMeta(524288, MemoryFormat.KV_2LTD, Dtype.BFLOAT16, (2, 4, 256, 128))}


@lm_client
def test_basic_check_remote_against_spec_server(spec_server: SpecLMServer) -> None:
    result = run_remote_basic_check(spec_server.url)
    assert result.ok, result.describe()
    # Header + payload in one sendmsg with TCP_NODELAY: no ~40 ms Nagle/delayed-ACK stall per GET
    # (the stock server's two sendall calls measured ~44 ms here). Generous bound for a loaded CI.
    assert result.metrics["ms"]["GET"] < 20, result.metrics


def test_garbage_drops_the_connection(spec_server: SpecLMServer) -> None:
    errors_before = len(spec_server.protocol_errors)
    with socket.create_connection((spec_server.host, spec_server.port), timeout=5) as sock:
        sock.sendall(struct.pack("<9i150s", 9, 0, 1, 2, 0, 0, 0, 0, 0, b"k".ljust(150)))
        assert sock.recv(36) == b""  # closed, nothing answered
    assert len(spec_server.protocol_errors) == errors_before + 1
    assert "unknown lm:// command 9" in spec_server.protocol_errors[-1]


def test_health_answered(spec_server: SpecLMServer) -> None:
    with socket.create_connection((spec_server.host, spec_server.port), timeout=5) as sock:
        sock.sendall(lmproto.encode_request(Command.HEALTH, ""))
        reply = lmproto.parse_reply(sock.recv(36))
    assert reply.ok


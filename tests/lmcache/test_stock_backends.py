"""Baselines: real LMCache 0.5.6 engines against LMCache's own `lm://` server and against Redis
(`redis://`). Process A stores 1024 tokens (4 chunks of 256) and waits for its remote puts; a fresh
process B with the local CPU tier off finds all of them remotely and retrieves them bit-exact.
curvine-py's backends are held to the same tests."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.lmcache.harness import (
    EngineJob,
    EngineResult,
    Model,
    RedisServer,
    StockLMServer,
    engine_config,
    has_lm_protocol,
    require_lm_protocol,
    require_lmcache,
    run_engine,
    store_and_retrieve,
)
from curvine_py.lmcache.compat import UnsupportedLMCache
from tests.netns import network_namespaces, requires_netns

require_lmcache()

TOKENS = 1024
MODEL = Model()
CHUNKS = TOKENS // 256


@pytest.fixture(scope="module")
def lm_server() -> Iterator[StockLMServer]:
    require_lm_protocol()   # LMCache 0.5.7 removed its lm:// server and client: skipped, saying so
    with StockLMServer() as server:
        yield server


@pytest.fixture(scope="module")
def lm_round_trip(lm_server: StockLMServer) -> tuple[EngineResult, EngineResult]:
    """Writer (seed 11) + fresh reader, shared by the tests that inspect them."""
    return store_and_retrieve(engine_config(remote_url=lm_server.url), tokens=TOKENS, seed=11,
                              model=MODEL)


def ops(result: EngineResult) -> dict[str, dict[str, Any]]:
    return {entry["op"]: entry for entry in result.data["ops"]}


def assert_full_remote_round_trip(writer: EngineResult, reader: EngineResult) -> None:
    w, r = ops(writer), ops(reader)
    assert w["store"]["bytes"] == CHUNKS * MODEL.chunk_bytes()
    assert w["flush"]["put_failed"] == 0, w["flush"]
    assert w["lookup"]["hit_tokens"] == TOKENS
    assert r["miss"]["hit_tokens"] == 0  # unknown tokens are a miss, not an error
    assert r["lookup"]["hit_tokens"] == TOKENS
    retrieve = r["retrieve"]
    assert retrieve["hit_tokens"] == TOKENS
    assert retrieve["prefix_mask"] is True
    assert retrieve["mismatched_tokens"] == 0
    assert retrieve["bit_exact"] is True


def test_stock_lm_server_round_trip(lm_server: StockLMServer,
                                    lm_round_trip: tuple[EngineResult, EngineResult]) -> None:
    writer, reader = lm_round_trip
    assert writer.data["backends"] == ["LocalCPUBackend", "RemoteBackend"]
    assert writer.data["hashseed"] == reader.data["hashseed"] == "0"
    assert_full_remote_round_trip(writer, reader)
    assert lm_server.alive()


def test_bit_exact_check_is_not_vacuous(lm_server: StockLMServer,
                                        lm_round_trip: tuple[EngineResult, EngineResult]) -> None:
    """The writer's tokens (so the same keys and hits) but other KV bytes in the reader's
    'GPU': the byte comparison must report every token as different."""
    cfg = engine_config(remote_url=lm_server.url, local_cpu=False)
    reader = run_engine(EngineJob(cfg, ["retrieve"], TOKENS, seed=11, kv_seed=99, model=MODEL))
    retrieve = reader.op("retrieve")
    assert retrieve["hit_tokens"] == TOKENS
    assert retrieve["mismatched_tokens"] == TOKENS
    assert retrieve["bit_exact"] is False


def test_redis_round_trip() -> None:
    with RedisServer() as redis:
        writer, reader = store_and_retrieve(engine_config(remote_url=redis.url), tokens=TOKENS,
                                            seed=12, model=MODEL)
        assert_full_remote_round_trip(writer, reader)
        # RedisConnector writes two keys per chunk: <key>kv_bytes and <key>metadata.
        assert redis.dbsize() == 2 * CHUNKS


@requires_netns()
def test_engines_in_network_namespaces() -> None:
    """Writer and reader each in their own namespace, the server on the root-side address: the
    same wiring the cross-node tests of our own backends use."""
    require_lm_protocol()
    with network_namespaces(2) as lab, StockLMServer(host=lab.root_address) as server:
        writer, reader = store_and_retrieve(engine_config(remote_url=server.url), tokens=TOKENS,
                                            seed=15, model=MODEL, writer_prefix=lab[0].prefix,
                                            reader_prefix=lab[1].prefix)
        assert_full_remote_round_trip(writer, reader)


@pytest.mark.skipif(has_lm_protocol(), reason="LMCache <= 0.5.6 has lm://: the round trips above run")
def test_lm_url_on_newer_lmcache_is_a_clear_error() -> None:
    """LMCache 0.5.7 only logs that no adapter parses an lm:// URL and runs without a remote tier;
    curvine_py.lmcache.compat.check_remote_url (called by the engine process before the engine is
    built) makes it one clear error naming the ways that work, and StockLMServer refuses to start."""
    result = run_engine(EngineJob(engine_config(remote_url="lm://127.0.0.1:9"), ["store"], TOKENS, model=MODEL),
                        check=False)
    assert not result.ok
    assert "UnsupportedLMCache: lm:// needs LMCache <= 0.5.6" in result.data["error"], result.describe()
    assert "native plugin" in result.data["error"]
    with pytest.raises(UnsupportedLMCache, match="removed its lm:// client and server"):
        StockLMServer().start()

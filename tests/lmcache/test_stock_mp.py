"""Baseline for LMCache's multiprocess (MP) mode end to end: a real `lmcache server` whose L2 is
Redis via the stock {"type": "resp"} adapter, driven by `lmcache bench server --mode cpu`. What one
server writes through to L2, a fresh server (empty L1) finds."""
from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.lmcache.harness import MPServer, RedisServer, require_lmcache, run_server_bench

require_lmcache()


@pytest.fixture(scope="module")
def redis() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


def resp_adapter(redis: RedisServer) -> dict[str, Any]:
    return {"type": "resp", "host": redis.host, "port": redis.port, "num_workers": 2}


def wait_dbsize(redis: RedisServer, want: int, timeout: float = 20.0) -> int:
    """L2 write-through is asynchronous: poll instead of sleeping."""
    deadline = time.monotonic() + timeout
    while (size := redis.dbsize()) < want and time.monotonic() < deadline:
        time.sleep(0.05)
    return size


def test_mp_server_writes_through_to_l2_and_a_fresh_server_reads_it(redis: RedisServer) -> None:
    redis.command("FLUSHALL")
    with MPServer([resp_adapter(redis)]) as first:
        cold = run_server_bench(first, start=0, end=2)
        assert cold.ok, cold.describe() + "\n--- server ---\n" + first.log_tail()
        lookups = [(s, p, h) for s, p, h, _ in cold.metrics["lookups"]]
        assert [x for x in lookups if x[1] == "cold"] == [(0, "cold", 0), (1, "cold", 0)]
        # A warm lookup can race the server's asynchronous L1 commit of the store just made (seen
        # once in ~10 runs); every warm hit is checksum-verified, and at least one must happen.
        warm_hits = [x for x in lookups if x[1] == "warm" and x[2] == 4]
        assert warm_hits and cold.metrics["results"]["checksum_ok"] == len(warm_hits)
        # 2 requests x 4 chunks of 256 tokens, written through to Redis (store policy "default").
        assert wait_dbsize(redis, 8) == 8
    with MPServer([resp_adapter(redis)]) as second:
        again = run_server_bench(second, start=0, end=2)
        assert again.returncode == 0, again.describe()
        # Empty L1, same token sequences: every chunk is found in the shared L2.
        assert [(s, p, h) for s, p, h, _ in again.metrics["lookups"] if p == "cold"] == [
            (0, "cold", 4), (1, "cold", 4)]

"""Baselines for LMCache multiprocess-mode L2 adapters, driven by LMCache's own tools: `lmcache
bench l2 --no-skip-verify` and `basic_check --mode test_l2_adapter`, for the stock {"type": "resp"}
adapter on Redis and for the pure-Python native_plugin toy (tests/lmcache/toy_native.py), which
proves the harness drives the plugin path our own connector will use."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.lmcache.harness import RedisServer, require_lmcache, run_l2_basic_check, run_l2_bench

require_lmcache()

TOY = {"type": "native_plugin", "module_path": "tests.lmcache.toy_native",
       "class_name": "DictNativeConnector", "adapter_params": {"note": "toy"}}


@pytest.fixture(scope="module")
def redis() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


def resp_adapter(redis: RedisServer) -> dict[str, Any]:
    return {"type": "resp", "host": redis.host, "port": redis.port, "num_workers": 2}


@pytest.mark.parametrize("which", ["resp", "toy_native_plugin"])
def test_l2_bench_verifies(which: str, redis: RedisServer) -> None:
    adapter = resp_adapter(redis) if which == "resp" else TOY
    result = run_l2_bench(adapter, num_keys=8, in_flight=2, data_size_kb=512, rounds=2)
    assert result.ok, result.describe()
    ops = {op["operation"]: op for key, op in result.metrics.items() if key.startswith("op_")}
    assert ops["Store"]["total_success"] == ops["Store"]["total_keys"] > 0
    assert ops["Load"]["total_success"] == ops["Load"]["total_keys"] > 0
    assert ops["Load"]["throughput_avg_mbps"] > 0


@pytest.mark.parametrize("which", ["resp", "toy_native_plugin"])
def test_l2_basic_check(which: str, redis: RedisServer) -> None:
    adapter = resp_adapter(redis) if which == "resp" else TOY
    result = run_l2_basic_check(adapter)
    assert result.ok, result.describe()

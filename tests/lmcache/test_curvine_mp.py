"""Way 3b: curvine-py as the L2 of LMCache's multiprocess mode, through the `native_plugin` L2
adapter (curvine_py.lmcache.native.CurvineNativeConnector) and the full `plugin` adapter
(curvine_py.lmcache.l2_adapter.CurvineL2Adapter), held to the baselines' tests
(test_stock_l2_tools.py, test_stock_mp.py) with the real LMCache tools (0.5.6, or 0.5.7rc2 with
scripts/test-lmcache-next.sh), across network namespaces (cluster on the bridge address, LMCache
processes in namespaces 0 and 1):

* `lmcache bench l2 --no-skip-verify` and `basic_check --mode test_l2_adapter` on the adapter alone;
* an `lmcache server` in namespace 0 (native_plugin) writes 2 requests x 1,024 tokens through to
  the cluster; a fresh server in namespace 1 (empty L1; the `plugin` adapter) finds every chunk
  on its first (cold) lookup and retrieves them bit-exact (its retrieved-data checksums equal the
  writer's checksums of the source KV);
* both workers killed -9 and restarted under that running server: its next cold lookups hit again
  and its next write-through lands (pooled connections to dead processes are dropped and redialled).
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from curvine_py.lmcache import adapters
from tests.harness import wait_until
from tests.lmcache.curvine_lab import TOKEN, Lab, curvine_lab
from tests.lmcache.harness import (
    MPServer,
    ToolResult,
    require_lmcache,
    run_l2_basic_check,
    run_l2_bench,
    run_server_bench,
)
from tests.netns import requires_netns

require_lmcache()
pytestmark = requires_netns()

CHUNKS_PER_REQUEST = 4       # run_server_bench: 1,024 tokens in chunks of 256
# 0.5.6 prints "(4 chunks)", 0.5.7 "(1 ranks, 4 chunks)"
_CHECKSUM = re.compile(r"\[seq (\d+)/(cold|warm)\] CHECKSUM: ([0-9a-f]+) \((?:\d+ ranks, )?(\d+) chunks\)")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with curvine_lab(tmp_path_factory.mktemp("lmcache-mp")) as lab:
        yield lab


def native_adapter(lab: Lab) -> dict[str, Any]:
    """The primary MP way. `shared`: one pool for the fleet (LMCache 0.5.7 tags its cache events
    and coordinator placements with it; 0.5.6 accepts and keeps it)."""
    return adapters.native_plugin(lab.cluster.master_address, TOKEN)


def plugin_adapter(lab: Lab) -> dict[str, Any]:
    """The full `plugin` L2 adapter (curvine_py.lmcache.l2_adapter.CurvineL2Adapter)."""
    return adapters.plugin(lab.cluster.master_address, TOKEN)


ADAPTERS = {"native_plugin": native_adapter, "plugin": plugin_adapter}


def stored_objects(lab: Lab) -> int:
    """KV objects on all workers, as last reported to the master."""
    return sum(w.objects for w in lab.cluster.client().master.report().workers if w.live)


def wait_objects(lab: Lab, want: int) -> None:
    wait_until(lambda: stored_objects(lab) == want, 20, f"{want} objects in the cluster")


def checksums(result: ToolResult, phase: str) -> dict[int, str]:
    """{request seq: digest of its chunks} printed by `lmcache bench server` for `phase` (cold =
    the source KV the request stored; warm = what a retrieve wrote into zeroed KV buffers)."""
    return {int(seq): digest for seq, p, digest, n in _CHECKSUM.findall(result.stdout)
            if p == phase and int(n) == CHUNKS_PER_REQUEST}


def cold_hits(result: ToolResult) -> list[tuple[int, int]]:
    return [(seq, hit) for seq, phase, hit, _ in result.metrics["lookups"] if phase == "cold"]


@pytest.mark.parametrize("way", sorted(ADAPTERS))
def test_l2_bench_verifies(lab: Lab, way: str) -> None:
    result = run_l2_bench(ADAPTERS[way](lab), num_keys=16, in_flight=4, data_size_kb=1024, rounds=2,
                          prefix=lab.writer)
    assert result.ok, result.describe()
    ops = {op["operation"]: op for key, op in result.metrics.items() if key.startswith("op_")}
    assert ops["Store"]["total_success"] == ops["Store"]["total_keys"] > 0
    # (its lookups are of never-stored keys by default: --lookup-max-hit-rate 0; basic_check
    # below looks stored keys up)
    assert ops["Load"]["total_success"] == ops["Load"]["total_keys"] > 0


@pytest.mark.parametrize("way", sorted(ADAPTERS))
def test_l2_basic_check(lab: Lab, way: str) -> None:
    result = run_l2_basic_check(ADAPTERS[way](lab), prefix=lab.reader)
    assert result.ok, result.describe()


def test_plugin_adapter_contract(lab: Lab) -> None:
    """What LMCache's `plugin` factory needs of the class on this LMCache: a concrete
    L2AdapterInterface built as cls(adapter_params, l1_memory_desc=..., <later keywords>), tagged
    STORAGE/REMOTE where LMCache has memory tags (0.5.7 made get_memory_tags abstract)."""
    from lmcache.v1.distributed.l2_adapters.base import L2AdapterInterface

    from curvine_py.lmcache.l2_adapter import CurvineL2Adapter

    adapter = CurvineL2Adapter({"master": lab.cluster.master_address, "token": TOKEN}, l1_memory_desc=None,
                               some_future_keyword=1)
    try:
        assert isinstance(adapter, L2AdapterInterface)
        assert not getattr(CurvineL2Adapter, "__abstractmethods__", None)
        assert adapter.report_status()["type"] == "curvine"
        tags = adapter.get_memory_tags()
        try:
            from lmcache.v1.distributed.api import MemoryResidency, MemorySegment, MemoryTags
        except ImportError:   # LMCache 0.5.6: no memory tags
            assert tags is None
        else:
            assert tags == MemoryTags(MemorySegment.STORAGE, MemoryResidency.REMOTE)
    finally:
        adapter.close()


def test_mp_server_write_through_read_by_fresh_server_in_other_namespace(lab: Lab) -> None:
    before = stored_objects(lab)
    with MPServer([native_adapter(lab)], host=lab.net[0].address, prefix=lab.writer) as first:
        cold = run_server_bench(first, start=0, end=2, prefix=lab.writer)
        assert cold.ok, cold.describe() + "\n--- server ---\n" + first.log_tail()
        assert cold_hits(cold) == [(0, 0), (1, 0)]
        source = checksums(cold, "cold")
        assert set(source) == {0, 1}
        # Write-through ("default" store policy): 2 requests x 4 chunks, on the cluster.
        wait_objects(lab, before + 2 * CHUNKS_PER_REQUEST)

    # The reader uses the full `plugin` adapter: same bytes, same key strings as native_plugin.
    with MPServer([plugin_adapter(lab)], host=lab.net[1].address, prefix=lab.reader) as second:
        again = run_server_bench(second, start=0, end=1, prefix=lab.reader)
        assert again.returncode == 0, again.describe() + "\n--- server ---\n" + second.log_tail()
        # Empty L1: every chunk of request 0 came from curvine, bit-exact.
        assert cold_hits(again) == [(0, CHUNKS_PER_REQUEST)]
        assert checksums(again, "warm") == {0: source[0]}

        for index in range(len(lab.cluster.workers)):   # every owner, kill -9 + restart
            lab.cluster.kill_worker(index)
        for index in range(len(lab.cluster.workers)):
            lab.cluster.restart_worker(index)
        lab.cluster.wait_for_live_workers(len(lab.cluster.workers))

        # Same server process, its pooled connections now dead: request 1 (never in its L1) hits.
        after = run_server_bench(second, start=1, end=2, prefix=lab.reader)
        assert after.returncode == 0, after.describe() + "\n--- server ---\n" + second.log_tail()
        assert cold_hits(after) == [(1, CHUNKS_PER_REQUEST)]
        assert checksums(after, "warm") == {1: source[1]}
        # A new request is written through to the restarted workers.
        new = run_server_bench(second, start=2, end=3, prefix=lab.reader)
        assert new.ok, new.describe()
        assert cold_hits(new) == [(2, 0)]
        wait_objects(lab, before + 3 * CHUNKS_PER_REQUEST)

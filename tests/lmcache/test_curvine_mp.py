"""Way 3b: curvine-py as the L2 of LMCache's multiprocess mode, through the `native_plugin` L2
adapter (curvine_py.lmcache.native.CurvineNativeConnector), held to the baselines' tests
(test_stock_l2_tools.py, test_stock_mp.py) with the real LMCache 0.5.6 tools, across network
namespaces (cluster on the bridge address, LMCache processes in namespaces 0 and 1):

* `lmcache bench l2 --no-skip-verify` and `basic_check --mode test_l2_adapter` on the adapter alone;
* an `lmcache server` in namespace 0 writes 2 requests x 1,024 tokens through to the cluster; a
  fresh server in namespace 1 (empty L1) finds every chunk on its first (cold) lookup and retrieves
  them bit-exact (its retrieved-data checksums equal the writer's checksums of the source KV);
* both workers killed -9 and restarted under that running server: its next cold lookups hit again
  and its next write-through lands (pooled connections to dead processes are dropped and redialled).
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

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
_CHECKSUM = re.compile(r"\[seq (\d+)/(cold|warm)\] CHECKSUM: ([0-9a-f]+) \((\d+) chunks\)")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with curvine_lab(tmp_path_factory.mktemp("lmcache-mp")) as lab:
        yield lab


def native_adapter(lab: Lab) -> dict[str, Any]:
    return {"type": "native_plugin", "module_path": "curvine_py.lmcache.native",
            "class_name": "CurvineNativeConnector",
            "adapter_params": {"master": lab.cluster.master_address, "token": TOKEN}}


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


def test_l2_bench_verifies(lab: Lab) -> None:
    result = run_l2_bench(native_adapter(lab), num_keys=16, in_flight=4, data_size_kb=1024, rounds=2,
                          prefix=lab.writer)
    assert result.ok, result.describe()
    ops = {op["operation"]: op for key, op in result.metrics.items() if key.startswith("op_")}
    assert ops["Store"]["total_success"] == ops["Store"]["total_keys"] > 0
    # (its lookups are of never-stored keys by default: --lookup-max-hit-rate 0; basic_check
    # below looks stored keys up)
    assert ops["Load"]["total_success"] == ops["Load"]["total_keys"] > 0


def test_l2_basic_check(lab: Lab) -> None:
    result = run_l2_basic_check(native_adapter(lab), prefix=lab.reader)
    assert result.ok, result.describe()


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

    with MPServer([native_adapter(lab)], host=lab.net[1].address, prefix=lab.reader) as second:
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

"""The L2 pull API (curvine_py/client/where.py) on a real cluster, and the KV policy using it."""
from __future__ import annotations

import asyncio
import pathlib

from curvine_py.client.where import L2Where, stored_prefix, where
from curvine_py.router.blockhash import lmcache_keys
from curvine_py.router.index import KVIndex
from curvine_py.router.l2 import CurvineL2
from curvine_py.router.policies import KVAware, KVSettings
from curvine_py.router.prompt import Prompt
from curvine_py.router.replicas import Replica
from tests.harness import Cluster


def test_where_and_the_l2_tier(tmp_path: pathlib.Path) -> None:
    with Cluster(tmp_path, workers=2) as cluster:
        cluster.wait_for_live_workers(2)
        tokens = list(range(64))
        keys = lmcache_keys(tokens, model="tiny", chunk_size=16, seed="0")     # 4 chunks
        with cluster.client() as client:
            for key in keys[:2] + keys[3:]:          # chunk 2 is missing
                client.kv.put(key, b"kv" * 100)
            found = where(client, keys)
            assert [r.stored for r in found] == [True, True, False, True]
            assert stored_prefix(found) == 2
            for residence in found[:2]:
                assert len(residence.workers) == 1 and residence.nodes[0] in ("node0", "node1")
                assert residence.workers[0] == client.kv.owners(residence.key, count=1)[0].worker_id
            prefix = L2Where(client.membership, client.io).where(keys, prefix=True)
            assert stored_prefix(prefix) == 2 and [r.stored for r in prefix] == [True, True, False, False]
            config = client.config

        l2 = CurvineL2(config, model="tiny", block_size=4, seed="0", chunk_size=16, timeout_s=5.0)
        try:
            hit = asyncio.run(l2.lookup(tokens))
            assert hit.blocks == 8 and "127.0.0.1" in hit.hosts          # 2 chunks of 16 = 8 blocks of 4
            policy = KVAware(KVIndex(), KVSettings(block_size=4, seed="0", inflight_cost=0), l2)
            a, b = Replica("http://127.0.0.1:1"), Replica("http://10.9.9.9:1")
            b.queued_prefill = 1                      # otherwise equal: the L2-local replica wins anyway
            decision = asyncio.run(policy.choose(Prompt(None, tuple(tokens)), [a, b]))
            assert decision.replica is a and decision.tiers == {"L2": 32} and decision.hit_tokens == 32
        finally:
            l2.close()

"""Real eviction under LMCache: a worker with a 4 MiB data dir (cache-class KV objects, LRU above
the 90% watermark down to 75%) receives sequence A (4 chunks of 512 KiB), then sequence B (4 more):
storing B evicts chunks of A (the least recently used). A fresh engine in another namespace then
sees A's evicted chunks as clean misses (contains False, lookup/retrieve stop at the first of them:
no error, no wrong bytes), while B and the chunks of A that survived are still there, B retrieved
bit-exact.
(A short EXISTS pin grace: LMCache's own lookups pin chunks for that long, which would keep them.)
"""
from __future__ import annotations

import pathlib

from tests.harness import wait_until
from tests.lmcache.curvine_lab import (
    MODEL,
    TOKENS,
    assert_full_hit,
    curvine_lab,
    entries,
    plugin_config,
    read,
)
from tests.lmcache.engine_proc import RESEED_STEP
from tests.lmcache.harness import EngineJob, require_lmcache, run_engine
from tests.netns import requires_netns

require_lmcache()
pytestmark = requires_netns()

SEED_A = 61
SEED_B = SEED_A + RESEED_STEP     # the reader's "reseed" op moves from A to B


def test_evicted_chunks_are_clean_misses(tmp_path: pathlib.Path) -> None:
    assert MODEL.chunk_bytes() == 512 * 1024
    with curvine_lab(tmp_path, workers=1, capacity="4MiB", worker_args=["--pin-grace-ms", "200"]) as lab:
        cfg = plugin_config(lab)
        for seed in (SEED_A, SEED_B):   # B after A: A is the least recently used
            writer = run_engine(EngineJob(cfg, ["store", "flush"], TOKENS, seed, model=MODEL), prefix=lab.writer)
            assert entries(writer, "flush")[0]["put_failed"] == 0
        master = lab.cluster.client().master
        wait_until(lambda: sum(w.evictions for w in master.report().workers) > 0, 10, "an eviction reported")
        reader = read(lab, cfg, SEED_A, ops=("contains", "lookup", "retrieve", "reseed", "contains", "lookup",
                                             "retrieve"))
    a, b = (c["chunks"]["RemoteBackend-curvine"] for c in entries(reader, "contains"))
    # LMCache puts a sequence's chunks concurrently, so their order inside A is not defined: only
    # that eviction took A (least recently used) and left B (stored last).
    assert False in a, f"some of A's chunks were evicted: {a}"
    assert True in a, f"some of A survived (eviction stops at the low watermark): {a}"
    assert b == [True] * len(b), "B, stored last, is whole"
    first_miss = a.index(False)
    chunk_tokens = TOKENS // len(a)
    lookup_a, lookup_b = entries(reader, "lookup")
    retrieve_a, retrieve_b = entries(reader, "retrieve")
    assert lookup_a["hit_tokens"] == first_miss * chunk_tokens   # the prefix stops at the evicted chunk
    assert retrieve_a["hit_tokens"] == first_miss * chunk_tokens and retrieve_a["mismatched_tokens"] == 0
    assert lookup_b["hit_tokens"] == TOKENS
    assert_full_hit(retrieve_b)

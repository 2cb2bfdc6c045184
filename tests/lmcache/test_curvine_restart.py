"""A worker killed -9 and restarted on its data dir while LMCache engines keep running (the failure
LMCache's own clients never recover from: production-stack #923). The engines are NOT restarted:
their connections to the dead process must be dropped and re-opened by themselves.

* native plugin (3a): engine B's pooled data-plane connections to the owner are dead after the
  restart; its next lookup/retrieve must hit 100% again, and engine A's next puts (over its own
  dead connections) must land. While the owner is down, its chunks are clean misses.
* lm:// (2): the engine talks to one worker; the *other* worker (owner of some of its keys) is
  restarted. The lm:// worker's own KV client must reconnect to its peer.

Engines in namespaces 0/1, the cluster on the bridge address (curvine_lab.py). 4,096 tokens (16
chunks) per sequence, so each of the 2 workers owns some chunk of every sequence (a miss of that
probability is 2 x 2^-16).
"""
from __future__ import annotations

import pathlib

from tests.lmcache.curvine_lab import (
    CHUNK,
    MODEL,
    Lab,
    assert_full_hit,
    assert_prefix_hit,
    curvine_lab,
    entries,
    lm_config,
    plugin_config,
)
from tests.lmcache.harness import EngineJob, EngineProcess, require_lm_protocol, require_lmcache
from tests.netns import requires_netns

require_lmcache()
pytestmark = requires_netns()

TOKENS = 4096


def first_owned(lab: Lab, keys: list[str], worker: int) -> int:
    """Index of the first chunk `worker` owns (the hit prefix while it is down)."""
    owned = [i for i, key in enumerate(keys) if lab.owner_index(key) == worker]
    assert owned, f"worker {worker} owns none of {len(keys)} chunks"
    return owned[0]


def test_native_plugin_survives_owner_restart(tmp_path: pathlib.Path) -> None:
    with curvine_lab(tmp_path) as lab:
        cfg = plugin_config(lab)
        # A: store sequence 1, then (after the restart, same process) sequence 2.
        writer_ops = ["keys", "store", "flush", "barrier", "reseed", "keys", "store", "flush"]
        # B: read sequence 1 (connections to both owners now pooled) | owner killed: lookup |
        # owner restarted, A wrote sequence 2: read 1 again, then 2.
        reader_ops = ["lookup", "retrieve", "barrier", "lookup", "retrieve", "barrier",
                      "lookup", "retrieve", "reseed", "lookup", "retrieve"]
        with EngineProcess(EngineJob(cfg, writer_ops, TOKENS, seed=31, model=MODEL), prefix=lab.writer) as a, \
             EngineProcess(EngineJob({**cfg, "local_cpu": False}, reader_ops, TOKENS, seed=31, model=MODEL),
                           prefix=lab.reader, start=False) as b:
            keys1 = entries(a.wait_barrier(1), "keys")[0]["keys"]
            victim = lab.owner_index(keys1[0])
            b.start()     # after A stored sequence 1
            b.wait_barrier(1)
            lab.cluster.kill_worker(victim)
            b.release(1)
            down = entries(b.wait_barrier(2), "lookup")[-1]
            lab.restart_worker(victim)
            a.release(1)
            writer = a.result()
            b.release(2)
            reader = b.result()
        keys2 = entries(writer, "keys")[1]["keys"]
        assert any(lab.owner_index(k) == victim for k in keys2), "the restarted worker took sequence-2 puts"

    assert [e["put_failed"] for e in entries(writer, "flush")] == [0, 0]
    before, while_down, after1, after2 = entries(reader, "lookup")
    assert before["hit_tokens"] == TOKENS
    # The killed owner's chunks are clean misses (no error, no hang): chunk 0 is its.
    assert down["hit_tokens"] == while_down["hit_tokens"] == 0
    retrieves = entries(reader, "retrieve")
    assert_full_hit(retrieves[0], TOKENS)
    assert retrieves[1]["hit_tokens"] == 0 and retrieves[1]["mismatched_tokens"] == 0
    # Same engine, after the restart: hits resume on the data the worker kept on disk...
    assert after1["hit_tokens"] == TOKENS
    assert_full_hit(retrieves[2], TOKENS)
    # ...and A's puts after the restart (over its pooled connections to the dead process) landed.
    assert after2["hit_tokens"] == TOKENS
    assert_full_hit(retrieves[3], TOKENS)


def test_lm_port_survives_peer_restart(tmp_path: pathlib.Path) -> None:
    require_lm_protocol()   # LMCache >= 0.5.7 has no lm:// client: skipped, saying so
    with curvine_lab(tmp_path) as lab:
        cfg = lm_config(lab, 0)
        writer_ops = ["keys", "store", "flush"]
        # One engine on worker 0's lm port for the whole run: read | peer killed: lookup, retrieve |
        # peer restarted: read again; store a new sequence (routed to the restarted peer too), read it.
        reader_ops = ["lookup", "retrieve", "barrier", "lookup", "retrieve", "barrier",
                      "lookup", "retrieve", "reseed", "keys", "store", "flush", "lookup", "retrieve"]
        with EngineProcess(EngineJob(cfg, writer_ops, TOKENS, seed=41, model=MODEL), prefix=lab.writer) as a:
            keys1 = entries(a.result(), "keys")[0]["keys"]
        peer = 1
        gone = first_owned(lab, keys1, peer)
        with EngineProcess(EngineJob({**cfg, "local_cpu": False}, reader_ops, TOKENS, seed=41, model=MODEL),
                           prefix=lab.reader) as b:
            b.wait_barrier(1)
            lab.cluster.kill_worker(peer)
            b.release(1)
            b.wait_barrier(2)
            lab.restart_worker(peer)
            b.release(2)
            reader = b.result()
        keys2 = entries(reader, "keys")[0]["keys"]
        assert any(lab.owner_index(k) == peer for k in keys2)

    assert entries(reader, "flush")[0]["put_failed"] == 0
    before, while_down, after1, after2 = entries(reader, "lookup")
    retrieves = entries(reader, "retrieve")
    assert before["hit_tokens"] == TOKENS
    assert_full_hit(retrieves[0], TOKENS)
    # The peer's chunks are clean misses through worker 0: the prefix before the first of them.
    assert while_down["hit_tokens"] == gone * CHUNK
    assert_prefix_hit(retrieves[1], gone * CHUNK)
    assert after1["hit_tokens"] == TOKENS
    assert_full_hit(retrieves[2], TOKENS)
    assert after2["hit_tokens"] == TOKENS
    assert_full_hit(retrieves[3], TOKENS)

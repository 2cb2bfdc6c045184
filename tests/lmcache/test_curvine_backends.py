"""curvine-py as LMCache's L2, with the real LMCache 0.5.6, held to the baselines' test
(test_stock_backends.py) across network namespaces: engine A in namespace 0 stores 1,024 tokens
(4 chunks of 256); a fresh engine B in namespace 1, local CPU tier off, finds all of them on the
cluster (bound to the root-side bridge address) and retrieves them bit-exact. And a chunk gone
from the cluster (deleted, as the evictor drops it) is a clean miss: the engine gets the prefix
before it, no error, no wrong bytes.

Ways here: the in-process native plugin (3a, `remote_storage_plugins: ["curvine"]`) and `lm://`
on a worker port (2); both store through the KV API with LMCache's 28-byte RemoteMetadata, so they
read each other's chunks. Worker restarts: test_curvine_restart.py. MP `native_plugin` (3b):
test_curvine_mp.py. `fs://` over the mount (1): test_curvine_fs.py.
"""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.lmcache.curvine_lab import (
    CHUNK,
    TOKENS,
    Lab,
    assert_full_hit,
    assert_prefix_hit,
    curvine_lab,
    entries,
    lm_config,
    plugin_config,
    read,
    write,
)
from tests.lmcache.harness import require_lm_protocol, require_lmcache
from tests.netns import requires_netns

require_lmcache()
pytestmark = requires_netns()

SEED = 21


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with curvine_lab(tmp_path_factory.mktemp("lmcache-curvine")) as lab:
        yield lab


@pytest.fixture(scope="module")
def native_keys(lab: Lab) -> list[str]:
    """Engine A stored SEED's 1,024 tokens through the native plugin."""
    return write(lab, plugin_config(lab), SEED)


def test_native_plugin_round_trip_across_namespaces(lab: Lab, native_keys: list[str]) -> None:
    reader = read(lab, plugin_config(lab), SEED)
    assert reader.data["backends"] == ["LocalCPUBackend", "RemoteBackend-curvine"]
    assert entries(reader, "miss")[0]["hit_tokens"] == 0       # unknown tokens: a miss, not an error
    assert entries(reader, "lookup")[0]["hit_tokens"] == TOKENS
    assert_full_hit(entries(reader, "retrieve")[0])
    # Stored straight on each key's owner (client-side rendezvous), where any client finds it.
    kv = lab.cluster.client().kv
    assert all(kv.exists(key) for key in native_keys)


def test_lm_port_round_trip_across_namespaces(lab: Lab) -> None:
    """Stock LMCache, nothing installed: A talks lm:// to worker 0, B to worker 1; each worker
    routes every key to its owner, so the two ports are one store."""
    require_lm_protocol()   # LMCache >= 0.5.7 has no lm:// client: skipped, saying so
    keys = write(lab, lm_config(lab, 0), seed=22)
    reader = read(lab, lm_config(lab, 1), seed=22)
    assert reader.data["backends"] == ["LocalCPUBackend", "RemoteBackend"]
    assert entries(reader, "miss")[0]["hit_tokens"] == 0
    assert entries(reader, "lookup")[0]["hit_tokens"] == TOKENS
    assert_full_hit(entries(reader, "retrieve")[0])
    kv = lab.cluster.client().kv     # on the owners, in the KV store the native plugin uses
    assert all(kv.exists(key) for key in keys)


def test_lm_port_reads_what_the_native_plugin_wrote(lab: Lab, native_keys: list[str]) -> None:
    require_lm_protocol()   # LMCache >= 0.5.7 has no lm:// client: skipped, saying so
    reader = read(lab, lm_config(lab, 1), SEED, ops=("lookup", "retrieve"))
    assert entries(reader, "lookup")[0]["hit_tokens"] == TOKENS
    assert_full_hit(entries(reader, "retrieve")[0])


@pytest.fixture(scope="module")
def evicted(lab: Lab) -> tuple[int, list[str]]:
    """SEED 23 stored through the native plugin, then its third chunk removed from the cluster
    (KVClient.delete: the same removal the evictor does, file and index entry gone)."""
    keys = write(lab, plugin_config(lab), seed=23)
    gone = 2
    assert lab.cluster.client().kv.delete(keys[gone])
    return gone, keys


def test_evicted_chunk_is_a_clean_miss_native(lab: Lab, evicted: tuple[int, list[str]]) -> None:
    gone, _ = evicted
    reader = read(lab, plugin_config(lab), seed=23, ops=("contains", "lookup", "retrieve"))
    contains = entries(reader, "contains")[0]["chunks"]["RemoteBackend-curvine"]
    assert contains == [i != gone for i in range(TOKENS // CHUNK)]
    assert entries(reader, "lookup")[0]["hit_tokens"] == gone * CHUNK
    assert_prefix_hit(entries(reader, "retrieve")[0], gone * CHUNK)


def test_evicted_chunk_is_a_clean_miss_lm(lab: Lab, evicted: tuple[int, list[str]]) -> None:
    require_lm_protocol()   # LMCache >= 0.5.7 has no lm:// client: skipped, saying so
    gone, _ = evicted
    reader = read(lab, lm_config(lab, 0), seed=23, ops=("contains", "lookup", "retrieve"))
    contains = entries(reader, "contains")[0]["chunks"]["RemoteBackend"]
    assert contains == [i != gone for i in range(TOKENS // CHUNK)]
    assert entries(reader, "lookup")[0]["hit_tokens"] == gone * CHUNK
    assert_prefix_hit(entries(reader, "retrieve")[0], gone * CHUNK)

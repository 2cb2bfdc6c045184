"""Batched gets (issue 14): KVClient.get_many pipelines each owner's keys on its connections and
asks all owners at once; results come back in key order, verified, misses as None, and an owner
killed mid-batch costs nothing but its own keys' detour to a replica."""
from __future__ import annotations

import pathlib
import threading

import pytest

from curvine_py.client.dataconn import PIPELINE_DEPTH
from curvine_py.core.errors import InvalidArgument
from tests.harness import Cluster, random_bytes

KiB, MiB = 1 << 10, 1 << 20


@pytest.mark.parametrize("streams", [1, 2])
def test_get_many_returns_every_object_in_key_order(cluster3: Cluster, streams: int) -> None:
    kv = cluster3.client().kv
    kv.batch_streams = streams
    values = {f"batch-{streams}-{i}": random_bytes(3 * KiB * (i + 1) + i, seed=i) for i in range(72)}
    for key, data in values.items():
        kv.put(key, data)
    keys = [*values, "batch-missing-1", "batch-missing-2"]
    per_owner = max(sum(1 for k in values if kv.owners(k)[0].worker_id == w.worker_id) for w in kv.owners("x"))
    assert per_owner > PIPELINE_DEPTH * streams, "some connection carries more requests than the window"
    got = kv.get_many(keys)
    assert [None if g is None else bytes(g) for g in got] == [*values.values(), None, None]
    # In the caller's buffers, in place; with the user metadata.
    outs = [bytearray(len(v) + 10) for v in values.values()]
    with_meta = kv.get_many_with_meta(list(values), outs)
    for out, data, hit in zip(outs, values.values(), with_meta, strict=True):
        assert hit is not None and hit[1] == b"" and bytes(out[:len(data)]) == data


def test_bad_batches_get_clear_errors_and_leave_the_connections_usable(cluster3: Cluster) -> None:
    kv = cluster3.client().kv
    kv.put("small-a", b"a" * 100)
    kv.put("small-b", b"b" * 5000)
    with pytest.raises(InvalidArgument, match="too small"):
        kv.get_many(["small-a", "small-b"], [bytearray(100), bytearray(10)])
    with pytest.raises(InvalidArgument, match="2 keys but 1 buffers"):
        kv.get_many(["small-a", "small-b"], [bytearray(100)])
    with pytest.raises(InvalidArgument, match="read-only"):
        kv.get_many(["small-a"], [b"x" * 100])
    with pytest.raises(InvalidArgument, match="non-empty"):
        kv.get_many(["small-a", ""])
    with pytest.raises(InvalidArgument, match="NUL"):
        kv.get_many(["bad\x00key"])
    assert [bytes(g or b"") for g in kv.get_many(["small-a", "small-b"])] == [b"a" * 100, b"b" * 5000]
    assert kv.get_many([]) == []


def test_an_owner_killed_mid_batch_costs_only_a_detour_to_the_replica(tmp_path: pathlib.Path) -> None:
    with Cluster(tmp_path, workers=3) as cluster:
        kv = cluster.client(kv_replicas=2).kv
        values = {f"killed-{i}": random_bytes(2 * MiB + i, seed=i) for i in range(12)}
        for key, data in values.items():
            kv.put(key, data)
        assert kv.get_many(list(values)) == [memoryview(v) for v in values.values()]   # connections open
        first_batch = threading.Event()
        killer = threading.Thread(target=lambda: (first_batch.wait(60), cluster.kill_worker(0)))
        killer.start()
        wrong: list[str] = []
        for round_ in range(6):
            got = kv.get_many(list(values))
            first_batch.set()
            wrong += [f"round {round_} {key}" for key, g in zip(values, got, strict=True)
                      if g is None or bytes(g) != values[key]]
        killer.join(60)
        assert wrong == []

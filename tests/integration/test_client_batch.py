"""Batched gets (issue 14): KVClient.get_many pipelines each owner's keys on its connections and
asks all owners at once; results come back in key order, verified, misses as None, and an owner
killed mid-batch costs nothing but its own keys' detour to a replica."""
from __future__ import annotations

import os
import pathlib
import signal
import threading
import time

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


@pytest.mark.parametrize("fault", ["kill", "stop"])
def test_a_lost_single_copy_owner_mid_batch_is_a_miss_for_its_keys_only(tmp_path: pathlib.Path, fault: str) -> None:
    """One copy per key (replicas 1): an owner killed (kill -9) or hung (SIGSTOP: connections
    accepted by the kernel, never answered) while batches run. Its keys come back as misses or
    as their exact bytes (a result that arrived before the fault), every other key exactly, and a
    batch ends within a bound set by the KV deadline, not by the 60 s bulk timeout."""
    deadline_s = 1.0
    with Cluster(tmp_path, workers=3) as cluster:
        kv = cluster.client(kv_replicas=1, kv_deadline_s=deadline_s, data_timeout_s=60.0).kv
        values = {f"lost-{i}": random_bytes(1 * MiB + i, seed=100 + i) for i in range(24)}
        for key, data in values.items():
            kv.put(key, data)
        victim = cluster.worker_id(0)
        on_victim = {k for k in values if kv.owners(k)[0].worker_id == victim}
        assert on_victim and len(on_victim) < len(values)
        # Never stored, ranked second on the victim: a miss at their first owner sends them on to it.
        absent = [k for k in (f"absent-{i}" for i in range(200))
                  if [w.worker_id for w in kv.owners(k)].index(victim) == 1][:4]
        keys = [*values, *absent]
        assert [bytes(g or b"") for g in kv.get_many(keys)] == [*values.values(), *[b""] * len(absent)]
        worker = cluster.workers[0]
        assert worker is not None
        pid = worker.process.pid
        started = threading.Event()
        fault_at = threading.Thread(target=lambda: (started.wait(60), os.kill(
            pid, signal.SIGKILL if fault == "kill" else signal.SIGSTOP)))
        fault_at.start()
        try:
            wrong: list[str] = []
            durations: list[float] = []
            for round_ in range(4):
                began = time.monotonic()
                started.set()
                got = kv.get_many(keys)
                durations.append(time.monotonic() - began)
                assert got[len(values):] == [None] * len(absent)
                for key, g in zip(values, got[:len(values)], strict=True):
                    if g is None and key in on_victim:
                        continue       # the lost owner's key: a miss
                    if g is None or bytes(g) != values[key]:
                        wrong.append(f"round {round_} {key}: {'miss' if g is None else 'wrong bytes'}")
                fault_at.join(60)
            assert wrong == []
            last = kv.get_many(list(values))   # the fault is in effect: the lost owner's keys miss
            assert {k for k, g in zip(values, last, strict=True) if g is None} == on_victim
            # A hung owner costs a batch at most one deadline (its streams time out together and
            # no other key waits for it again in that batch), never the 60 s bulk timeout.
            assert max(durations) < 1.5 * deadline_s + 0.2, durations
        finally:
            if fault == "stop":
                os.kill(pid, signal.SIGCONT)

"""KVClient's read owners, remembered per membership view: always what ranking the view gives."""
from __future__ import annotations

from typing import Any, cast

from curvine_py.client import kv as kv_module
from curvine_py.client.kv import KVClient
from curvine_py.client.membership import MembershipCache, View, WorkerAddress
from curvine_py.client.workerio import WorkerIO
from curvine_py.core.hashing import Node, Rendezvous


def view_of(worker_ids: list[str], epoch: int = 1) -> View:
    workers = {w: WorkerAddress(w, "127.0.0.1", 1000 + i, f"node-{w}", "", 1 << 30)
               for i, w in enumerate(worker_ids)}
    return View(epoch, workers, Rendezvous([Node(w) for w in worker_ids]), reachable=workers)


def client(replicas: int = 1) -> KVClient:
    # Placement only: neither the membership nor the I/O is touched by read_owners.
    return KVClient(cast(MembershipCache, None), cast(WorkerIO, None), replicas=replicas)


def ids(owners: list[WorkerAddress]) -> list[str]:
    return [w.worker_id for w in owners]


def test_read_owners_are_the_first_of_the_rank_for_the_given_view() -> None:
    kv = client(replicas=2)
    view = view_of([f"w{i}" for i in range(6)])
    for i in range(200):
        key = f"key-{i}"
        expected = ids(kv.owners(key, view, 3))
        assert ids(kv.read_owners(key, view)) == expected
        assert ids(kv.read_owners(key, view)) == expected   # the remembered answer


def test_a_new_view_or_replica_count_is_ranked_afresh() -> None:
    kv = client()
    everyone = view_of(["a", "b", "c", "d"])
    key = next(f"k{i}" for i in range(1000) if ids(kv.owners(f"k{i}", everyone, 1)) == ["a"])
    assert ids(kv.read_owners(key, everyone))[0] == "a"
    without_a = view_of(["b", "c", "d"], epoch=2)      # "a" left: its keys move, nothing stale
    assert ids(kv.read_owners(key, without_a)) == ids(kv.owners(key, without_a, 2))
    assert "a" not in ids(kv.read_owners(key, without_a))
    kv.replicas = 3
    assert ids(kv.read_owners(key, without_a)) == ids(kv.owners(key, without_a, 4))


def test_the_table_is_bounded(monkeypatch: Any) -> None:
    monkeypatch.setattr(kv_module, "READ_OWNERS_CACHED", 10)
    kv = client()
    view = view_of(["a", "b"])
    for i in range(35):
        kv.read_owners(f"k{i}", view)
    assert len(kv._read_owners[2]) <= 10
